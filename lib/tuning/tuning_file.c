/*
 * tuning_file.c — reading tuning files (the format: tuning_file.h).
 */
#include "tuning_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/algorithm_names.h"
#include "../core/params.h"

#define TUNING_HEADER "chorus-tuning 1"

/* "LOW-HIGH", "LOW-", "-HIGH" or "N" (both bounds N) of whole numbers or sizes. */
static bool parse_range(const char *text, bool sizes, size_t *low, size_t *high)
{
    char first[64], second[64];
    const char *dash = strchr(text, '-');
    size_t first_length = dash ? (size_t)(dash - text) : strlen(text);
    if (first_length >= sizeof first || (dash && strlen(dash + 1) >= sizeof second))
        return false;
    memcpy(first, text, first_length);
    first[first_length] = '\0';
    snprintf(second, sizeof second, "%s", dash ? dash + 1 : first);
    *low = 0;
    *high = 0;
    if (first[0] != '\0' && !(sizes ? params_parse_bytes(first, low) : params_parse_count(first, low)))
        return false;
    if (second[0] != '\0' && !(sizes ? params_parse_bytes(second, high) : params_parse_count(second, high)))
        return false;
    return first[0] != '\0' || second[0] != '\0';
}

/* One condition of a row, `key=value` or a flag; false with `why` filled when malformed. */
static bool parse_condition(char *word, struct selection_rule *rule, char *why, size_t why_size)
{
    char *equals = strchr(word, '=');
    if (equals == NULL) {
        if (strcmp(word, "power_of_two") == 0) {
            rule->power_of_two_ranks = true;
            return true;
        }
        snprintf(why, why_size, "'%s' is not a condition (bytes=, ranks=, local_ranks=, "
                 "placement=, power_of_two)", word);
        return false;
    }
    *equals = '\0';
    const char *key = word, *value = equals + 1;
    size_t low = 0, high = 0;
    if (strcmp(key, "bytes") == 0) {
        if (!parse_range(value, true, &low, &high) || (high != 0 && high < low)) {
            snprintf(why, why_size, "bytes=%s is not a range of sizes (4K-1M, 64K-, -16K)",
                     value);
            return false;
        }
        rule->min_bytes = low;
        rule->max_bytes = high;
    } else if (strcmp(key, "ranks") == 0 || strcmp(key, "local_ranks") == 0) {
        bool local = key[0] == 'l';
        if (!parse_range(value, false, &low, &high) || low > 1 << 24 || high > 1 << 24 ||
            (high != 0 && high < low) || (local && low != high)) {
            snprintf(why, why_size, "%s=%s is not %s", key, value,
                     local ? "a number of ranks per host" : "a number or range of ranks");
            return false;
        }
        if (local) {
            rule->local_ranks = (int)low;
        } else {
            rule->min_ranks = (int)low;
            rule->max_ranks = (int)high;
        }
    } else if (strcmp(key, "placement") == 0) {
        static const char *const names[] = {"any", "shared-host", "one-host"};
        size_t i = 0;
        while (i < ARRAY_LENGTH(names) && strcmp(value, names[i]) != 0)
            i++;
        if (i == ARRAY_LENGTH(names)) {
            snprintf(why, why_size, "placement=%s: any, shared-host or one-host", value);
            return false;
        }
        rule->placement = (enum placement)i;
    } else {
        snprintf(why, why_size, "unknown condition '%s' (bytes, ranks, local_ranks, placement)",
                 key);
        return false;
    }
    return true;
}

/* Parses one row (`line`, modified) into `rule`; false with `why` filled when malformed. */
/* "FILE, line N: why" (the comment after '#', if any), malloc'd; NULL when out of memory. */
static char *provenance_of(const char *source, size_t number, const char *comment)
{
    while (comment && (*comment == ' ' || *comment == '\t'))
        comment++;
    char provenance[512];
    snprintf(provenance, sizeof provenance, "%s, line %zu%s%s", source, number,
             comment && *comment ? ": " : "", comment ? comment : "");
    provenance[strcspn(provenance, "\r")] = '\0';
    return strdup(provenance);
}

static bool parse_row(char *line, const char *source, size_t number, struct selection_rule *rule,
                      char *why, size_t why_size)
{
    char *comment = strchr(line, '#');
    if (comment != NULL)
        *comment++ = '\0';
    char *save = NULL;
    char *collective_word = strtok_r(line, " \t\r", &save);
    char *algorithm_word = strtok_r(NULL, " \t\r", &save);
    int collective_id = algorithm_collective_find(collective_word);
    if (collective_id < 0) {
        snprintf(why, why_size, "unknown collective '%s' (allreduce, broadcast, allgather, "
                 "reducescatter, alltoall)", collective_word);
        return false;
    }
    chorus_collective collective = (chorus_collective)collective_id;
    int algorithm = algorithm_word ? algorithm_find(collective, algorithm_word) : -1;
    if (algorithm < 0) {
        char *names = algorithm_names(collective);
        snprintf(why, why_size, "%s has no algorithm '%s' (%s)", collective_word,
                 algorithm_word ? algorithm_word : "", names ? names : "?");
        free(names);
        return false;
    }
    *rule = (struct selection_rule){.collective = collective, .algorithm = algorithm};
    for (char *word = strtok_r(NULL, " \t\r", &save); word; word = strtok_r(NULL, " \t\r", &save))
        if (!parse_condition(word, rule, why, why_size))
            return false;
    rule->provenance = provenance_of(source, number, comment);
    if (rule->provenance == NULL) {
        snprintf(why, why_size, "out of memory");
        return false;
    }
    return true;
}

static bool settable(int parameter)
{
    return parameter >= 0 && (param_table[parameter].flags & PARAM_TUNING_FILE);
}

/* "A, B or C": the parameters a setting row may name, from the parameter table. */
static void list_settable(char *text, size_t size)
{
    size_t count = 0, total = 0, used = 0;
    for (size_t i = 0; i < param_count; i++)
        total += settable((int)i);
    text[0] = '\0';
    for (size_t i = 0; i < param_count && used < size; i++) {
        if (!settable((int)i))
            continue;
        count++;
        used += (size_t)snprintf(text + used, size - used, "%s%s",
                                 count == 1 ? "" : count == total ? " or " : ", ",
                                 param_table[i].name);
    }
}

/* "setting NAME=VALUE [# why]" into `setting`; false with `why` filled in. */
static bool parse_setting(char *line, const char *source, size_t number,
                          struct tuning_setting *setting, char *why, size_t why_size)
{
    char *comment = strchr(line, '#');
    if (comment != NULL)
        *comment++ = '\0';
    char *save = NULL;
    strtok_r(line, " \t\r", &save); /* "setting" */
    char *assignment = strtok_r(NULL, " \t\r", &save);
    char *extra = strtok_r(NULL, " \t\r", &save);
    char *equals = assignment != NULL ? strchr(assignment, '=') : NULL;
    if (equals == NULL || extra != NULL) {
        snprintf(why, why_size, "a setting is 'setting NAME=VALUE', one per line");
        return false;
    }
    *equals = '\0';
    const char *value = equals + 1;
    int parameter = param_index(assignment);
    if (!settable(parameter)) {
        char names[320];
        list_settable(names, sizeof names);
        snprintf(why, why_size, "'%.64s' cannot be set by a tuning file (%s can)", assignment,
                 names);
        return false;
    }
    struct chorus_params scratch;
    char hint[160];
    if (strlen(value) >= sizeof setting->value ||
        !params_store_text(&scratch, parameter, value, hint, sizeof hint)) {
        snprintf(why, why_size, "%s=%.64s: %s", assignment, value, hint);
        return false;
    }
    *setting = (struct tuning_setting){.parameter = parameter,
                                       .provenance = provenance_of(source, number, comment)};
    snprintf(setting->value, sizeof setting->value, "%s", value);
    if (setting->provenance == NULL) {
        snprintf(why, why_size, "out of memory");
        return false;
    }
    return true;
}

/* Whether `line` is a setting row (its first word is "setting"). */
static bool setting_row(const char *line)
{
    line += strspn(line, " \t");
    return strncmp(line, "setting", 7) == 0 && (line[7] == ' ' || line[7] == '\t' ||
                                                 line[7] == '\0' || line[7] == '\r');
}

static bool blank_or_comment(const char *line)
{
    line += strspn(line, " \t\r");
    return *line == '\0' || *line == '#';
}

chorus_status tuning_parse(const char *text, const char *source, struct tuning_table *table,
                           char *error, size_t error_size)
{
    *table = (struct tuning_table){0};
    chorus_status status = CHORUS_OK;
    char *copy = strdup(text);
    char why[400] = "";
    size_t number = 0;
    bool header = false;
    if (copy == NULL) {
        snprintf(error, error_size, "%s: out of memory", source);
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    for (char *line = copy, *next; line != NULL; line = next) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        number++;
        if (blank_or_comment(line))
            continue;
        if (!header) {
            line[strcspn(line, "\r")] = '\0';
            if (strcmp(line + strspn(line, " \t"), TUNING_HEADER) != 0) {
                snprintf(why, sizeof why, "the first line must be '%s' (a tuning file that "
                         "chorus-tune writes), not '%.60s'", TUNING_HEADER, line);
                goto malformed;
            }
            header = true;
            continue;
        }
        if (table->count + table->setting_count == TUNING_ROWS_LIMIT) {
            snprintf(why, sizeof why, "more than %d rows", TUNING_ROWS_LIMIT);
            goto malformed;
        }
        if (setting_row(line)) {
            if (table->setting_count % 16 == 0) {
                struct tuning_setting *grown = realloc(
                    table->settings, (table->setting_count + 16) * sizeof *grown);
                if (grown == NULL) {
                    snprintf(why, sizeof why, "out of memory");
                    goto malformed;
                }
                table->settings = grown;
            }
            if (!parse_setting(line, source, number, &table->settings[table->setting_count],
                               why, sizeof why))
                goto malformed;
            table->setting_count++;
            continue;
        }
        if (table->count % 64 == 0) {
            struct selection_rule *grown =
                realloc(table->rules, (table->count + 64) * sizeof *grown);
            if (grown == NULL) {
                snprintf(why, sizeof why, "out of memory");
                goto malformed;
            }
            table->rules = grown;
        }
        if (!parse_row(line, source, number, &table->rules[table->count], why, sizeof why))
            goto malformed;
        table->count++;
    }
    if (!header) {
        number = 1;
        snprintf(why, sizeof why, "empty: no '%s' line", TUNING_HEADER);
        goto malformed;
    }
    goto out;
malformed:
    snprintf(error, error_size, "CHORUS_TUNING_FILE %s, line %zu: %s", source, number, why);
    tuning_free(table);
    status = CHORUS_ERR_BAD_PARAMETER;
out:
    free(copy);
    return status;
}

chorus_status tuning_read_file(const char *path, char **text, size_t *length, char *error,
                               size_t error_size)
{
    chorus_status status = CHORUS_OK;
    char *buffer = NULL;
    FILE *file = fopen(path, "rb");
    *text = NULL;
    *length = 0;
    if (file == NULL) {
        snprintf(error, error_size, "CHORUS_TUNING_FILE %s: %s", path, strerror(errno));
        return CHORUS_ERR_BAD_PARAMETER;
    }
    buffer = malloc(TUNING_FILE_LIMIT + 1);
    if (buffer == NULL) {
        snprintf(error, error_size, "CHORUS_TUNING_FILE %s: out of memory", path);
        status = CHORUS_ERR_OUT_OF_MEMORY;
        goto out;
    }
    size_t got = fread(buffer, 1, TUNING_FILE_LIMIT + 1, file);
    if (ferror(file) || got > TUNING_FILE_LIMIT) {
        snprintf(error, error_size, "CHORUS_TUNING_FILE %s: %s", path,
                 ferror(file) ? "cannot be read" : "larger than 1 MiB");
        status = CHORUS_ERR_BAD_PARAMETER;
        goto out;
    }
    buffer[got] = '\0';
    if (memchr(buffer, '\0', got) != NULL) {
        snprintf(error, error_size, "CHORUS_TUNING_FILE %s: not a text file", path);
        status = CHORUS_ERR_BAD_PARAMETER;
        goto out;
    }
    *text = buffer;
    *length = got;
    buffer = NULL;
out:
    free(buffer);
    fclose(file);
    return status;
}

bool tuning_apply_settings(const struct tuning_table *table, struct param_set *set,
                           const enum param_source *deciding, char *error, size_t error_size)
{
    for (size_t s = 0; s < table->setting_count; s++) {
        const struct tuning_setting *setting = &table->settings[s];
        if (deciding[setting->parameter] != PARAM_SOURCE_DEFAULT)
            continue;
        char why[160];
        if (!params_store_text(&set->values, setting->parameter, setting->value, why,
                               sizeof why)) {
            snprintf(error, error_size, "%s: %s", setting->provenance, why);
            return false;
        }
        set->sources[setting->parameter] = PARAM_SOURCE_TUNING_FILE;
    }
    return true;
}

void tuning_free(struct tuning_table *table)
{
    for (size_t i = 0; i < table->count; i++)
        free((char *)table->rules[i].provenance);
    free(table->rules);
    for (size_t i = 0; i < table->setting_count; i++)
        free(table->settings[i].provenance);
    free(table->settings);
    *table = (struct tuning_table){0};
}
