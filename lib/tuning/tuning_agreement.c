/*
 * tuning_agreement.c — CHORUS_TUNING_FILE at init (tuning_agreement.h): rank 0's copy read
 * and sent to every rank over the channel, parsed there, its settings given to the parameters.
 * The steps, each over agreement.h, every message encoded by the codec (wire.h):
 *   1. rank 0 sends its reading of the file (the text, or why it could not read it) and where
 *      its parameters came from;
 *   2. every rank learns whether a rank could not take that message (the first one's why);
 *   3. every rank sends rank 0 the digest of its own copy, for a warning where they differ;
 *   4. every rank parses rank 0's text, which fails alike everywhere, and applies its settings.
 */
#include "tuning_agreement.h"

#include "../core/log.h"
#include "../negotiation/wire.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static_assert(TUNING_FILE_LIMIT <= WIRE_AGREEMENT_TEXT_MAX,
              "a tuning file fits in the agreement's message");
static_assert(ARRAY_LENGTH(((struct param_set *)0)->sources) <= WIRE_SOURCES_MAX,
              "the sources of every parameter fit in the agreement's message");

/* The tuning file's settings replace defaults: where rank 0 took a parameter from its default
 * (rank 0's `sources`, `source_count` of them, the rest defaults), every rank takes the file's
 * value (each setting shapes the wire, so rank 0's value is every rank's already); a value rank
 * 0's user set stays. Rank 0 logs which. */
static chorus_status apply_settings(struct param_set *params, int rank,
                                    const struct tuning_table *table, const char *path,
                                    const uint8_t *sources, size_t source_count, char *error,
                                    size_t error_size)
{
    if (table->setting_count == 0)
        return CHORUS_OK;
    enum param_source deciding[ARRAY_LENGTH(params->sources)];
    for (size_t i = 0; i < ARRAY_LENGTH(deciding); i++)
        deciding[i] = i < source_count ? (enum param_source)sources[i] : PARAM_SOURCE_DEFAULT;
    if (!tuning_apply_settings(table, params, deciding, error, error_size))
        return CHORUS_ERR_BAD_PARAMETER;
    for (size_t s = 0; rank == 0 && s < table->setting_count; s++) {
        const struct tuning_setting *setting = &table->settings[s];
        const char *name = param_table[setting->parameter].name;
        if (deciding[setting->parameter] == PARAM_SOURCE_DEFAULT)
            LOG(LOG_INFO, "init", "CHORUS_TUNING_FILE %s: %s=%s (%s)", path, name, setting->value,
                setting->provenance);
        else
            LOG(LOG_INFO, "init", "CHORUS_TUNING_FILE %s: %s stays as set (%s), not %s", path, name,
                param_source_name(deciding[setting->parameter]), setting->value);
    }
    return CHORUS_OK;
}

/* Rank 0 (gather's take): a rank's digest of its copy into `context`'s digests (none kept when
 * they could not be allocated). A digest that does not decode is said, and left 0. */
static void keep_digest(void *context, int rank, const uint8_t *bytes, size_t length)
{
    uint64_t *digests = context;
    struct wire_agreement message;
    char why[256];
    if (wire_agreement_decode(bytes, length, WIRE_DIGEST, &message, why, sizeof why) != CHORUS_OK) {
        LOG(LOG_WARNING, "init", "CHORUS_TUNING_FILE: rank %d's digest of its copy: %s", rank, why);
        return;
    }
    if (digests != NULL)
        digests[rank] = message.digest;
    wire_agreement_free(&message);
}

/* Rank 0: the ranks whose copy differs from its own, in a warning. */
static void warn_of_other_copies(const uint64_t *digests, int size, const char *path)
{
    char differing[256] = "";
    for (int r = 1; r < size; r++)
        if (digests[r] != 0 && digests[r] != digests[0] &&
            strlen(differing) + 12 < sizeof differing)
            snprintf(differing + strlen(differing), sizeof differing - strlen(differing), "%s%d",
                     differing[0] ? "," : "", r);
    if (differing[0] != '\0')
        LOG(LOG_WARNING, "init",
            "CHORUS_TUNING_FILE %s: rank(s) %s hold a different copy; "
            "rank 0's is used on every rank",
            path, differing);
}

chorus_status tuning_agree_on_file(const struct agreement *agreement, struct param_set *params,
                                   struct tuning_table *table, char *error, size_t error_size)
{
    const char *path = params->values.tuning_file; /* rank 0's, as every wire setting */
    int rank = agreement->rank;
    if (path[0] == '\0')
        return CHORUS_OK;
    chorus_status status = CHORUS_OK;
    uint8_t *bytes = NULL;
    size_t length = 0;
    uint64_t *digests = NULL;
    struct wire_agreement file = {.kind = WIRE_TUNING_FILE};
    char *text = NULL;
    size_t text_length = 0;
    char why[512] = "";
    chorus_status read = tuning_read_file(path, &text, &text_length, why, sizeof why);
    uint64_t mine = read == CHORUS_OK ? text_digest(text, text_length) : 0;
    if (rank == 0) {
        struct wire_agreement reading = {.kind = WIRE_TUNING_FILE,
                                         .status = read,
                                         .message = read != CHORUS_OK ? why : NULL,
                                         .text = text,
                                         .length = text_length,
                                         .source_count = ARRAY_LENGTH(params->sources)};
        for (size_t i = 0; i < reading.source_count; i++)
            reading.sources[i] = (uint8_t)params->sources[i];
        length = wire_agreement_encode(&reading, &bytes);
    }
    free(text);
    status = agreement_broadcast(agreement, &bytes, &length, error, error_size);
    if (status != CHORUS_OK)
        goto out;
    chorus_status taken =
        wire_agreement_decode(bytes, length, WIRE_TUNING_FILE, &file, why, sizeof why);
    if (rank == 0 && bytes == NULL) {
        taken = CHORUS_ERR_OUT_OF_MEMORY;
        snprintf(why, sizeof why, "out of memory (CHORUS_TUNING_FILE)");
    }
    free(bytes);
    bytes = NULL;
    status = agreement_first_failure(agreement, taken, why, error, error_size);
    if (status != CHORUS_OK)
        goto out;
    if (file.status != CHORUS_OK) {
        snprintf(error, error_size, "rank 0: %s", file.message);
        status = file.status;
        goto out;
    }
    if (rank == 0)
        digests = calloc((size_t)agreement->size, sizeof *digests);
    length = wire_agreement_encode(&(struct wire_agreement){.kind = WIRE_DIGEST, .digest = mine},
                                   &bytes);
    status = agreement_gather(agreement, bytes, length, keep_digest, digests, error, error_size);
    bytes = NULL; /* taken */
    if (status != CHORUS_OK)
        goto out;
    status = tuning_parse(file.text, path, table, error, error_size);
    if (status != CHORUS_OK)
        goto out;
    status = apply_settings(params, rank, table, path, file.sources, file.source_count, error,
                            error_size);
    if (status != CHORUS_OK)
        goto out;
    if (rank == 0) {
        if (digests != NULL)
            warn_of_other_copies(digests, agreement->size, path);
        LOG(LOG_INFO, "init",
            "CHORUS_TUNING_FILE %s: %zu row(s) tried before the built-in ones, "
            "%zu setting(s)",
            path, table->count, table->setting_count);
    }
out:
    free(bytes);
    free(digests);
    wire_agreement_free(&file);
    return status;
}
