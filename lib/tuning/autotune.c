/*
 * autotune.c — see autotune.h.
 */
#include "autotune.h"

#include "../core/log.h"
#include "../core/name_table.h"
#include "../negotiation/wire.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

static_assert(AUTOTUNE_CANDIDATES == PARAM_AUTOTUNE_CANDIDATES,
              "the search tries as many values as the parameter table lists");
/* Rank 0 -> every rank at the end of a trial, what runs from the next list on: a WIRE_AUTOTUNE
 * message of the codec. */
static_assert(AUTOTUNE_SETTINGS_MAX <= WIRE_AUTOTUNE_SETTINGS_MAX,
              "every setting autotune tries fits in its message");

int autotune_settings(size_t *settings, int capacity)
{
    int count = 0;
    for (size_t i = 0; i < param_count && count < capacity; i++)
        if (param_table[i].autotune_candidates != NULL)
            settings[count++] = i;
    return count;
}

void autotune_column_name(size_t parameter, char *text, size_t size)
{
    const struct param_definition *definition = &param_table[parameter];
    const char *name = definition->name + strlen("CHORUS_");
    size_t i = 0;
    for (; name[i] != '\0' && i + 1 < size; i++)
        text[i] = (char)tolower((unsigned char)name[i]);
    text[i] = '\0';
    if (definition->type == PARAM_BYTES)
        snprintf(text + i, size - i, "_bytes");
}

/* The settings of `set` (rank 0's) that the user set, which stay as they are: a bit per
 * setting. */
static unsigned fixed_settings(const struct autotune *autotune, const struct param_set *set)
{
    unsigned mask = 0;
    for (int s = 0; s < autotune->setting_count; s++) {
        enum param_source source = set->sources[autotune->settings[s]];
        /* A tuning file's value is a measured default: autotune starts from it. */
        if (source != PARAM_SOURCE_DEFAULT && source != PARAM_SOURCE_TUNING_FILE)
            mask |= 1u << s;
    }
    /* Fusion turned off by the user: no tensor limit changes anything. */
    int threshold = param_index("CHORUS_FUSION_THRESHOLD");
    int limit = param_index("CHORUS_FUSION_TENSOR_LIMIT");
    for (int s = 0; s < autotune->setting_count; s++)
        if ((int)autotune->settings[s] == threshold && (mask & (1u << s)) &&
            set->values.fusion_threshold == 0)
            for (int t = 0; t < autotune->setting_count; t++)
                if ((int)autotune->settings[t] == limit)
                    mask |= 1u << t;
    return mask;
}

/* "CHORUS_FUSION_TENSOR_LIMIT=65536, CHORUS_FUSION_THRESHOLD=134217728, ..." */
static void describe(const struct autotune *autotune, const double *settings, char *text,
                     size_t text_size)
{
    size_t used = 0;
    text[0] = '\0';
    for (int s = 0; s < autotune->setting_count && used < text_size; s++) {
        const struct param_definition *row = &param_table[autotune->settings[s]];
        used += (size_t)snprintf(text + used, text_size - used,
                                 row->type == PARAM_BYTES ? "%s%s=%.0f" : "%s%s=%g",
                                 s ? ", " : "", row->name, settings[s]);
    }
}

static void apply(struct autotune *autotune, const double *settings)
{
    for (int s = 0; s < autotune->setting_count; s++)
        params_store_number(autotune->params, autotune->settings[s], settings[s]);
}

void autotune_init(struct autotune *autotune, struct param_set *set, int rank, int size,
                   struct channel *channel, const int *other_ranks, struct executor *executor)
{
    struct chorus_params *params = &set->values;
    *autotune = (struct autotune){.on = params->autotune,
                                  .rank = rank,
                                  .size = size,
                                  .channel = channel,
                                  .other_ranks = other_ranks,
                                  .executor = executor,
                                  .params = params,
                                  .warmup_steps = AUTOTUNE_FIRST_WARMUP_STEPS,
                                  .trial = 1};
    name_table_init(&autotune->names_seen);
    if (!autotune->on)
        return;
    autotune->setting_count = autotune_settings(autotune->settings, AUTOTUNE_SETTINGS_MAX);
    autotune->steps_per_trial =
        params->autotune_steps_per_trial > 0 ? (unsigned)params->autotune_steps_per_trial : 1;
    double candidates[AUTOTUNE_SETTINGS_MAX][AUTOTUNE_CANDIDATES];
    for (int s = 0; s < autotune->setting_count; s++) {
        autotune->start[s] = params_number(params, autotune->settings[s]);
        memcpy(candidates[s], param_table[autotune->settings[s]].autotune_candidates,
               sizeof candidates[s]);
    }
    if (rank != 0)
        return;
    unsigned fixed_mask = fixed_settings(autotune, set);
    autotune_search_start(&autotune->search, autotune->setting_count, autotune->start,
                          (const double(*)[AUTOTUNE_CANDIDATES])candidates, fixed_mask);
    for (int s = 0; s < autotune->setting_count; s++)
        if (fixed_mask & (1u << s))
            LOG(LOG_INFO, "autotune", "%s stays as the user set it",
                param_table[autotune->settings[s]].name);
    if (params->autotune_log[0] != '\0') {
        autotune->log = fopen(params->autotune_log, "w");
        if (autotune->log == NULL) {
            LOG(LOG_WARNING, "autotune", "cannot write CHORUS_AUTOTUNE_LOG=%s; tuning without it",
                params->autotune_log);
            return;
        }
        fprintf(autotune->log, "trial,phase");
        for (int s = 0; s < autotune->setting_count; s++) {
            char column[64];
            autotune_column_name(autotune->settings[s], column, sizeof column);
            fprintf(autotune->log, ",%s", column);
        }
        fprintf(autotune->log, ",steps,seconds,bytes,score_bytes_per_second,step_ms\n");
    }
}

void autotune_release(struct autotune *autotune)
{
    if (autotune->log != NULL)
        fclose(autotune->log);
    free(autotune->anchor);
    name_table_destroy(&autotune->names_seen);
    *autotune = (struct autotune){0};
}

static void finish(struct autotune *autotune)
{
    autotune->on = false;
    name_table_destroy(&autotune->names_seen);
    name_table_init(&autotune->names_seen);
    if (autotune->log != NULL) {
        fclose(autotune->log);
        autotune->log = NULL;
    }
}

/* The log's columns of `settings`: whole numbers for bytes, as they are for the rest. */
static void write_settings(struct autotune *autotune, const double *settings)
{
    for (int s = 0; s < autotune->setting_count; s++)
        fprintf(autotune->log, param_table[autotune->settings[s]].type == PARAM_BYTES ? ",%.0f"
                                                                                     : ",%g",
                settings[s]);
}

/* Rank 0: scores the trial that ended, logs it and picks the next settings into `message`. */
static void decide(struct autotune *autotune, double seconds, struct wire_agreement *message)
{
    struct autotune_search *search = &autotune->search;
    double score = seconds > 0 ? autotune->window_bytes / seconds : 0;
    if (autotune->log != NULL) {
        fprintf(autotune->log, "%u,%s", autotune->trial, autotune_phase_name(search->phase));
        write_settings(autotune, search->trial);
        fprintf(autotune->log, ",%u,%.6f,%.0f,%.0f,%.3f\n", autotune->steps_per_trial, seconds,
                autotune->window_bytes, score, seconds * 1e3 / autotune->steps_per_trial);
    }
    bool more = autotune_search_record(search, score);
    *message = (struct wire_agreement){.kind = WIRE_AUTOTUNE,
                                       .trial = autotune->trial,
                                       .settled = !more,
                                       .setting_count = (size_t)autotune->setting_count};
    memcpy(message->settings, search->trial, message->setting_count * sizeof *search->trial);
    if (!more && autotune->log != NULL) {
        fprintf(autotune->log, ",settled");
        write_settings(autotune, search->trial);
        fprintf(autotune->log, ",,,,,\n");
        fflush(autotune->log);
    }
}

/* Writes the failure's text into `error`; returns its status. */
static chorus_status __attribute__((format(printf, 4, 5)))
fail(char *error, size_t error_size, chorus_status status, const char *format, ...)
{
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(error, error_size, format, arguments);
    va_end(arguments);
    return status;
}

/* The other ranks: waits for rank 0's message on the trial that ended here, within the bound
 * on waits, and while a peer has not failed. */
static chorus_status receive_decision(struct autotune *autotune, struct wire_agreement *message,
                                      char *error, size_t error_size)
{
    double began = clock_seconds();
    double bound = autotune->params->timeout_seconds;
    for (;;) {
        uint8_t *bytes = NULL;
        size_t length = 0;
        int sender = -1;
        chorus_status status = autotune->channel->receive(autotune->channel->state, 0,
                                                          CHANNEL_AUTOTUNE, &bytes, &length,
                                                          &sender);
        if (status != CHORUS_OK)
            return fail(error, error_size, status,
                        "autotune: receiving rank 0's settings failed");
        if (bytes != NULL) {
            char why[256];
            status = wire_agreement_decode(bytes, length, WIRE_AUTOTUNE, message, why, sizeof why);
            free(bytes);
            if (status != CHORUS_OK)
                return fail(error, error_size, status, "autotune: rank 0's settings: %s", why);
            if (message->trial != autotune->trial ||
                message->setting_count != (size_t)autotune->setting_count)
                return fail(error, error_size, CHORUS_ERR_PROTOCOL,
                            "autotune: rank 0's settings (%zu for trial %u) are not the %d for "
                            "trial %u, which ended here",
                            message->setting_count, message->trial, autotune->setting_count,
                            autotune->trial);
            return CHORUS_OK;
        }
        chorus_status peer = executor_peer_failure(autotune->executor, error, error_size);
        if (peer != CHORUS_OK)
            return peer;
        if (bound > 0 && clock_seconds() - began > bound)
            return fail(error, error_size, CHORUS_ERR_TIMEOUT,
                        "autotune: rank 0 sent no settings for %g s after trial %u "
                        "(CHORUS_TIMEOUT_SECONDS)",
                        bound, autotune->trial);
        if (autotune->while_waiting != NULL)
            autotune->while_waiting(autotune->waiting_owner);
        sched_yield();
    }
}

static chorus_status end_trial(struct autotune *autotune, double seconds, char *error,
                               size_t error_size)
{
    struct wire_agreement message;
    if (autotune->rank == 0) {
        decide(autotune, seconds, &message);
        uint8_t *bytes = NULL;
        size_t length = wire_agreement_encode(&message, &bytes);
        if (bytes == NULL)
            return fail(error, error_size, CHORUS_ERR_OUT_OF_MEMORY, "autotune: out of memory");
        if (autotune->size > 1 &&
            autotune->channel->post(autotune->channel->state, bytes, length, autotune->other_ranks,
                                    autotune->size - 1, CHANNEL_AUTOTUNE) != CHORUS_OK)
            return fail(error, error_size, CHORUS_ERR_MPI,
                        "autotune: sending the next settings failed");
        if (autotune->size == 1)
            free(bytes);
    } else {
        chorus_status status = receive_decision(autotune, &message, error, error_size);
        if (status != CHORUS_OK)
            return status;
    }
    apply(autotune, message.settings);
    char text[512];
    describe(autotune, message.settings, text, sizeof text);
    if (message.settled) {
        LOG(LOG_INFO, "autotune", "settled after %u trials on %s", autotune->trial, text);
        finish(autotune);
        return CHORUS_OK;
    }
    LOG(LOG_DEBUG, "autotune", "trial %u: %s", autotune->trial + 1, text);
    autotune->trial++;
    autotune->anchors_seen = 0;
    autotune->warmup_steps = AUTOTUNE_WARMUP_STEPS;
    autotune->window_open = false;
    return CHORUS_OK;
}

/* Before steps are known: the first name that runs twice becomes the anchor (tensors that ran
 * once, a broadcast of the parameters before training, say, never mark a step). False when out
 * of memory. */
static bool find_anchor(struct autotune *autotune, int set, const char *name)
{
    if (name_table_find(&autotune->names_seen, set, name) == NULL)
        return name_table_insert(&autotune->names_seen, set, name, autotune);
    if ((autotune->anchor = strdup(name)) == NULL)
        return false;
    autotune->anchor_set = set;
    name_table_destroy(&autotune->names_seen);
    name_table_init(&autotune->names_seen);
    return true;
}

chorus_status autotune_batch_done(struct autotune *autotune,
                                  const struct wire_response *responses, size_t count,
                                  char *error, size_t error_size)
{
    if (!autotune->on)
        return CHORUS_OK;
    for (size_t i = 0; i < count; i++) {
        const struct wire_response *response = &responses[i];
        if (response->type != RESPONSE_EXECUTE && response->type != RESPONSE_CACHED)
            continue;
        if (response->request.collective == COLLECTIVE_PROCESS_SET)
            continue;
        const char *name = response->request.name != NULL ? response->request.name : "";
        autotune->window_bytes += (double)response_bytes(response);
        int set = request_name_set(&response->request);
        if (autotune->anchor == NULL && !find_anchor(autotune, set, name))
            return fail(error, error_size, CHORUS_ERR_OUT_OF_MEMORY, "autotune: out of memory");
        if (autotune->anchor != NULL && set == autotune->anchor_set &&
            strcmp(name, autotune->anchor) == 0) {
            autotune->anchors_seen++;
            autotune->responses_since_anchor = 0;
        } else {
            autotune->responses_since_anchor++;
        }
    }
    if (autotune->responses_since_anchor > AUTOTUNE_GIVE_UP_RESPONSES) {
        if (autotune->rank == 0)
            LOG(LOG_WARNING, "autotune",
                "no training steps to measure: %s in %d responses; keeping the starting "
                "settings",
                autotune->anchor != NULL ? "the first tensor to repeat has not run again"
                                         : "no tensor name ran twice",
                AUTOTUNE_GIVE_UP_RESPONSES);
        apply(autotune, autotune->start);
        finish(autotune);
        return CHORUS_OK;
    }
    double now = clock_seconds();
    if (!autotune->window_open) {
        if (autotune->anchors_seen >= autotune->warmup_steps) {
            autotune->window_open = true;
            autotune->window_start = now;
            autotune->window_bytes = 0;
        }
        return CHORUS_OK;
    }
    if (autotune->anchors_seen >= autotune->warmup_steps + autotune->steps_per_trial)
        return end_trial(autotune, now - autotune->window_start, error, error_size);
    return CHORUS_OK;
}
