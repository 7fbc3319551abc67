/*
 * tuning_agreement.c — CHORUS_TUNING_FILE at init (tuning_agreement.h): rank 0's copy read
 * and sent to every rank, parsed there, its settings given to the parameters.
 */
#include "tuning_agreement.h"

#include "../core/log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tuning file's settings replace defaults: where rank 0 took a parameter from its default,
 * every rank takes the file's value (each setting shapes the wire, so rank 0's value is every
 * rank's already); a value rank 0's user set stays. Rank 0 logs which. */
static chorus_status apply_settings(struct chorus_context *context, int rank,
                                    const struct tuning_table *table, const char *path, char *error,
                                    size_t error_size)
{
    if (table->setting_count == 0)
        return CHORUS_OK;
    int sources[ARRAY_LENGTH(context->params.sources)];
    for (size_t i = 0; i < ARRAY_LENGTH(sources); i++)
        sources[i] = (int)context->params.sources[i];
    if (MPI_Bcast(sources, (int)ARRAY_LENGTH(sources), MPI_INT, 0, context->control_comm) !=
        MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Bcast failed during init (CHORUS_TUNING_FILE)");
        return CHORUS_ERR_MPI;
    }
    enum param_source deciding[ARRAY_LENGTH(sources)];
    for (size_t i = 0; i < ARRAY_LENGTH(sources); i++)
        deciding[i] = (enum param_source)sources[i];
    if (!tuning_apply_settings(table, &context->params, deciding, error, error_size))
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

chorus_status tuning_agree_on_file(struct chorus_context *context, int rank, int size,
                                  struct tuning_table *table, char *error, size_t error_size)
{
    const char *path = context->params.values.tuning_file; /* rank 0's, as every wire setting */
    MPI_Comm comm = context->control_comm;
    chorus_status status = CHORUS_OK;
    char *text = NULL;
    uint64_t *digests = NULL;
    /* rank 0's status, the text's length, its message when it failed */
    struct {
        int status;
        unsigned length;
        char message[512];
    } head = {CHORUS_OK, 0, ""};
    if (path[0] == '\0')
        return CHORUS_OK;
    size_t length = 0;
    chorus_status read = tuning_read_file(path, &text, &length, head.message, sizeof head.message);
    if (rank == 0) {
        head.status = read;
        head.length = read == CHORUS_OK ? (unsigned)length : 0;
    }
    uint64_t mine = read == CHORUS_OK ? text_digest(text, length) : 0;
    if (rank == 0)
        digests = calloc((size_t)size, sizeof *digests);
    if (MPI_Bcast(&head, (int)sizeof head, MPI_BYTE, 0, comm) != MPI_SUCCESS ||
        MPI_Gather(&mine, 1, MPI_UINT64_T, digests, 1, MPI_UINT64_T, 0, comm) != MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Bcast failed during init (CHORUS_TUNING_FILE)");
        status = CHORUS_ERR_MPI;
        goto out;
    }
    if (head.status != CHORUS_OK) {
        snprintf(error, error_size, "rank 0: %s", head.message);
        status = (chorus_status)head.status;
        goto out;
    }
    if (rank != 0) {
        free(text);
        text = malloc((size_t)head.length + 1);
        if (text == NULL) {
            snprintf(error, error_size, "out of memory (CHORUS_TUNING_FILE)");
            status = CHORUS_ERR_OUT_OF_MEMORY;
        }
    }
    int have = status == CHORUS_OK, all = 0;
    if (MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Allreduce failed during init (CHORUS_TUNING_FILE)");
        status = CHORUS_ERR_MPI;
        goto out;
    }
    if (!all) {
        if (status == CHORUS_OK) {
            snprintf(error, error_size, "another rank ran out of memory (CHORUS_TUNING_FILE)");
            status = CHORUS_ERR_OUT_OF_MEMORY;
        }
        goto out;
    }
    if (MPI_Bcast(text, (int)head.length, MPI_CHAR, 0, comm) != MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Bcast failed during init (CHORUS_TUNING_FILE)");
        status = CHORUS_ERR_MPI;
        goto out;
    }
    text[head.length] = '\0';
    status = tuning_parse(text, path, table, error, error_size);
    if (status != CHORUS_OK)
        goto out;
    status = apply_settings(context, rank, table, path, error, error_size);
    if (status != CHORUS_OK)
        goto out;
    if (rank == 0) {
        char differing[256] = "";
        for (int r = 1; r < size; r++)
            if (digests != NULL && digests[r] != 0 && digests[r] != digests[0] &&
                strlen(differing) + 12 < sizeof differing)
                snprintf(differing + strlen(differing), sizeof differing - strlen(differing),
                         "%s%d", differing[0] ? "," : "", r);
        if (differing[0] != '\0')
            LOG(LOG_WARNING, "init",
                "CHORUS_TUNING_FILE %s: rank(s) %s hold a different copy; "
                "rank 0's is used on every rank",
                path, differing);
        LOG(LOG_INFO, "init",
            "CHORUS_TUNING_FILE %s: %zu row(s) tried before the built-in ones, "
            "%zu setting(s)",
            path, table->count, table->setting_count);
    }
out:
    free(digests);
    free(text);
    return status;
}
