/*
 * params.c — reading the parameters: from the environment, the init options and Horovod's
 * variables, into the values the table (params_table.c) describes; their text and wire forms.
 * A malformed value is an error that names the variable and the value; chorus never falls back
 * silently to a default.
 */
#include "params.h"

#include "algorithm_names.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *param_source_name(enum param_source source)
{
    switch (source) {
    case PARAM_SOURCE_DEFAULT:
        return "default";
    case PARAM_SOURCE_ENVIRONMENT:
        return "environment";
    case PARAM_SOURCE_HOROVOD:
        return "HOROVOD_* variable";
    case PARAM_SOURCE_OPTIONS:
        return "chorus_init options";
    case PARAM_SOURCE_RANK0:
        return "rank 0";
    case PARAM_SOURCE_TUNING_FILE:
        return "tuning file";
    }
    return "unknown";
}

bool params_parse_bytes(const char *text, size_t *bytes)
{
    while (isspace((unsigned char)*text))
        text++;
    if (!isdigit((unsigned char)*text))
        return false;
    errno = 0;
    char *end = NULL;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0)
        return false;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        shift = 10;
        end++;
        break;
    case 'M':
        shift = 20;
        end++;
        break;
    case 'G':
        shift = 30;
        end++;
        break;
    case 'T':
        shift = 40;
        end++;
        break;
    default:
        break;
    }
    if (shift != 0 && toupper((unsigned char)*end) == 'I')
        end++;
    if (toupper((unsigned char)*end) == 'B')
        end++;
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return false;
    if (shift != 0 && value > (SIZE_MAX >> shift))
        return false;
    *bytes = (size_t)value << shift;
    return true;
}

bool params_parse_count(const char *text, size_t *count)
{
    if (!isdigit((unsigned char)*text))
        return false;
    errno = 0;
    char *end = NULL;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || value > SIZE_MAX)
        return false;
    *count = (size_t)value;
    return true;
}

static bool parse_seconds(const char *text, double *seconds)
{
    errno = 0;
    char *end = NULL;
    double value = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(value) || value < 0)
        return false;
    *seconds = value;
    return true;
}

/* Index of `text` among `count` names (case ignored), or -1. */
static int name_index(const char *text, const char *const *names, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (strcasecmp(text, names[i]) == 0)
            return (int)i;
    return -1;
}

/* Stores `text` as the value of parameter `definition`; false when it does not parse. `why`
 * receives a hint for the error message. */
static bool param_store(struct chorus_params *values, const struct param_definition *definition,
                        const char *text, char *why, size_t why_size)
{
    void *field = (char *)values + definition->offset;
    why[0] = '\0';
    switch (definition->type) {
    case PARAM_BYTES:
        snprintf(why, why_size, "expected bytes such as 1048576, 64K, 128M or 1G");
        return params_parse_bytes(text, field);
    case PARAM_COUNT: {
        snprintf(why, why_size, "expected an integer from 0 to %zu", PARAM_COUNT_LIMIT);
        size_t count = 0;
        if (!params_parse_count(text, &count) || count > PARAM_COUNT_LIMIT)
            return false;
        *(size_t *)field = count;
        return true;
    }
    case PARAM_CHUNK: {
        snprintf(why, why_size, "expected 0 (the default) or a power of two from 4K to 256M");
        size_t bytes = 0;
        if (!params_parse_bytes(text, &bytes))
            return false;
        if (bytes == 0 && strcmp(text, definition->default_value) != 0)
            return param_store(values, definition, definition->default_value, why, why_size);
        if (bytes < 4096 || bytes > ((size_t)256 << 20) || (bytes & (bytes - 1)) != 0)
            return false;
        *(size_t *)field = bytes;
        return true;
    }
    case PARAM_SLOT: {
        snprintf(why, why_size, "expected bytes from 0 to 1M, such as 16K");
        size_t bytes = 0;
        if (!params_parse_bytes(text, &bytes) || bytes > PARAM_SLOT_LIMIT)
            return false;
        *(size_t *)field = bytes;
        return true;
    }
    case PARAM_AREAS: {
        snprintf(why, why_size, "expected 0 (the default), 2, 4, 8 or 16");
        size_t areas = 0;
        if (!params_parse_count(text, &areas))
            return false;
        if (areas == 0 && strcmp(text, definition->default_value) != 0)
            return param_store(values, definition, definition->default_value, why, why_size);
        if (areas != 2 && areas != 4 && areas != 8 && areas != 16)
            return false;
        *(size_t *)field = areas;
        return true;
    }
    case PARAM_SECONDS:
        snprintf(why, why_size, "expected a non-negative number");
        return parse_seconds(text, field);
    case PARAM_FRACTION: {
        snprintf(why, why_size, "expected a number above 0, at most 1");
        double fraction = 0;
        if (!parse_seconds(text, &fraction) || !(fraction > 0 && fraction <= 1))
            return false;
        *(double *)field = fraction;
        return true;
    }
    case PARAM_LOG_LEVEL: {
        enum log_level level;
        snprintf(why, why_size, "expected error (Horovod's fatal), warning, info, debug or trace");
        if (!log_level_parse(text, &level))
            return false;
        *(int *)field = (int)level;
        return true;
    }
    case PARAM_COMPRESSION: {
        snprintf(why, why_size, "expected none, fp16, bf16, int8, int4 or topk");
        for (int compression = CHORUS_COMPRESSION_NONE; compression <= DTYPE_COMPRESSION_LAST;
             compression++)
            if (strcasecmp(text, dtype_compression_name(compression)) == 0) {
                *(int *)field = compression;
                return true;
            }
        return false;
    }
    case PARAM_CHOICE: {
        size_t count = 0;
        while (definition->choices[count] != NULL)
            count++;
        /* "expected auto, cached or streaming" */
        size_t used = (size_t)snprintf(why, why_size, "expected");
        for (size_t i = 0; i < count && used < why_size; i++)
            used += (size_t)snprintf(why + used, why_size - used, "%s %s",
                                     i == 0 ? "" : i + 1 == count ? " or" : ",",
                                     definition->choices[i]);
        int index = name_index(text, definition->choices, count);
        if (index >= 0)
            *(int *)field = index;
        return index >= 0;
    }
    case PARAM_SWITCH: {
        snprintf(why, why_size, "expected on or off");
        const char *const names[] = {"off", "on", "0", "1", "false", "true", "no", "yes"};
        int index = name_index(text, names, ARRAY_LENGTH(names));
        if (index >= 0)
            *(bool *)field = index % 2 == 1;
        return index >= 0;
    }
    case PARAM_PATH:
        snprintf(why, why_size, "longer than %d bytes", PARAM_TEXT_LENGTH - 1);
        if (strlen(text) >= PARAM_TEXT_LENGTH)
            return false;
        strcpy(field, text);
        return true;
    case PARAM_ALGORITHM: {
        char *valid = algorithm_names((chorus_collective)definition->collective);
        snprintf(why, why_size, "expected auto or one of: %s", valid ? valid : "?");
        free(valid);
        if (strlen(text) >= PARAM_TEXT_LENGTH)
            return false;
        if (strcmp(text, "auto") != 0 &&
            algorithm_find((chorus_collective)definition->collective, text) < 0)
            return false;
        strcpy(field, text);
        return true;
    }
    }
    return false;
}

/* Whether `row` is the `length` bytes at `name` (a variable's name in an environment entry). */
static bool names_equal(const char *row, const char *name, size_t length)
{
    return strlen(row) == length && strncmp(row, name, length) == 0;
}

static const struct param_definition *param_find(const char *name, size_t name_length,
                                                 size_t *index)
{
    for (size_t i = 0; i < param_count; i++) {
        if (names_equal(param_table[i].name, name, name_length)) {
            *index = i;
            return &param_table[i];
        }
    }
    return NULL;
}

bool params_store_text(struct chorus_params *values, int index, const char *text, char *why,
                       size_t why_size)
{
    if (index < 0 || (size_t)index >= param_count) {
        snprintf(why, why_size, "no such parameter");
        return false;
    }
    return param_store(values, &param_table[index], text, why, why_size);
}

int param_index(const char *name)
{
    size_t index = 0;
    return param_find(name, strlen(name), &index) != NULL ? (int)index : -1;
}

static chorus_status bad_value(char *error, size_t error_size, const char *name,
                               const char *value, const char *why, const char *where)
{
    snprintf(error, error_size, "parameter %s has a malformed value \"%s\" (%s): %s", name, value,
             where, why);
    return CHORUS_ERR_BAD_PARAMETER;
}

/* A variable of another part of chorus: not unknown, so not warned about. */
static bool read_elsewhere(const char *name, size_t length)
{
    for (size_t i = 0; i < param_elsewhere_count; i++)
        if (names_equal(param_elsewhere_table[i].name, name, length))
            return true;
    return false;
}

static chorus_status load_horovod_aliases(struct param_set *set, char *const *environment,
                                          char *error, size_t error_size)
{
    char why[512];
    for (char *const *entry = environment; entry != NULL && *entry != NULL; entry++) {
        const char *equals = strchr(*entry, '=');
        if (strncmp(*entry, "HOROVOD_", 8) != 0 || equals == NULL)
            continue;
        for (size_t index = 0; index < param_count; index++) {
            const struct param_definition *definition = &param_table[index];
            const char *alias = definition->horovod;
            if (alias == NULL || !names_equal(alias, *entry, (size_t)(equals - *entry)))
                continue;
            const char *value = equals + 1;
            if (!param_store(&set->values, definition, value, why, sizeof why)) {
                char where[96];
                snprintf(where, sizeof where, "from %s, read as %s", alias, definition->name);
                return bad_value(error, error_size, alias, equals + 1, why, where);
            }
            set->sources[index] = PARAM_SOURCE_HOROVOD;
        }
    }
    return CHORUS_OK;
}

chorus_status params_load(struct param_set *set, char *const *environment, const char *overrides,
                          char *error, size_t error_size)
{
    char why[512];
    memset(set, 0, sizeof *set);
    for (size_t i = 0; i < param_count; i++) {
        bool ok = param_store(&set->values, &param_table[i], param_table[i].default_value, why,
                              sizeof why);
        (void)ok;
        set->sources[i] = PARAM_SOURCE_DEFAULT;
    }
    chorus_status aliases = load_horovod_aliases(set, environment, error, error_size);
    if (aliases != CHORUS_OK)
        return aliases;
    for (char *const *entry = environment; entry != NULL && *entry != NULL; entry++) {
        if (strncmp(*entry, "CHORUS_", 7) != 0)
            continue;
        const char *equals = strchr(*entry, '=');
        if (equals == NULL)
            continue;
        size_t index = 0;
        const struct param_definition *definition =
            param_find(*entry, (size_t)(equals - *entry), &index);
        if (definition == NULL) {
            if (!read_elsewhere(*entry, (size_t)(equals - *entry)) &&
                strlen(set->unknown_variables) + (size_t)(equals - *entry) + 2 <
                    sizeof set->unknown_variables) {
                if (set->unknown_variables[0] != '\0')
                    strcat(set->unknown_variables, " ");
                strncat(set->unknown_variables, *entry, (size_t)(equals - *entry));
            }
            continue;
        }
        if (!param_store(&set->values, definition, equals + 1, why, sizeof why))
            return bad_value(error, error_size, definition->name, equals + 1, why,
                             "from the environment");
        set->sources[index] = PARAM_SOURCE_ENVIRONMENT;
    }
    for (const char *cursor = overrides; cursor != NULL && *cursor != '\0';) {
        const char *end = strchr(cursor, ';');
        size_t length = end ? (size_t)(end - cursor) : strlen(cursor);
        char item[PARAM_TEXT_LENGTH * 2];
        if (length >= sizeof item) {
            size_t name_length = strcspn(cursor, "=;");
            snprintf(error, error_size,
                     "chorus_init options: the setting of %.*s is %zu characters long; at most "
                     "%zu fit",
                     (int)(name_length < 64 ? name_length : 64), cursor, length,
                     sizeof item - 1);
            return CHORUS_ERR_BAD_PARAMETER;
        }
        memcpy(item, cursor, length);
        item[length] = '\0';
        cursor = end ? end + 1 : cursor + length;
        if (length == 0)
            continue;
        char *equals = strchr(item, '=');
        size_t index = 0;
        const struct param_definition *definition =
            equals ? param_find(item, (size_t)(equals - item), &index) : NULL;
        if (definition == NULL) {
            snprintf(error, error_size,
                     "chorus_init options: \"%s\" is not NAME=VALUE with a known CHORUS_* name "
                     "(chorus-info lists them)",
                     item);
            return CHORUS_ERR_BAD_PARAMETER;
        }
        if (!param_store(&set->values, definition, equals + 1, why, sizeof why))
            return bad_value(error, error_size, definition->name, equals + 1, why,
                             "from chorus_init options");
        set->sources[index] = PARAM_SOURCE_OPTIONS;
    }
    return CHORUS_OK;
}

/* Bytes a parameter of `type` occupies in struct chorus_params. */
static size_t param_field_size(enum param_type type)
{
    switch (type) {
    case PARAM_BYTES:
    case PARAM_COUNT:
    case PARAM_AREAS:
    case PARAM_CHUNK:
    case PARAM_SLOT:
        return sizeof(size_t);
    case PARAM_SECONDS:
    case PARAM_FRACTION:
        return sizeof(double);
    case PARAM_LOG_LEVEL:
    case PARAM_COMPRESSION:
    case PARAM_CHOICE:
        return sizeof(int);
    case PARAM_SWITCH:
        return sizeof(bool);
    case PARAM_PATH:
    case PARAM_ALGORITHM:
        return PARAM_TEXT_LENGTH;
    }
    return 0;
}

/* A value as text that parses back to the same bits: seconds with every digit a double has. */
static void format_exact(const struct chorus_params *values, size_t index, char *text,
                         size_t text_size)
{
    if (param_table[index].type == PARAM_SECONDS || param_table[index].type == PARAM_FRACTION)
        snprintf(text, text_size, "%.17g",
                 *(const double *)((const char *)values + param_table[index].offset));
    else
        params_format_value(values, index, text, text_size);
}

size_t params_encode_wire(const struct chorus_params *values, char *text, size_t size)
{
    size_t used = 0;
    for (size_t i = 0; i < param_count; i++) {
        if (!(param_table[i].flags & PARAM_SHAPES_WIRE))
            continue;
        char value[PARAM_TEXT_LENGTH];
        format_exact(values, i, value, sizeof value);
        char entry[PARAM_TEXT_LENGTH + 64];
        int length = snprintf(entry, sizeof entry, "%s=%s", param_table[i].name, value);
        size_t bytes = (size_t)length + 1; /* with its '\0' */
        if (used + bytes <= size)
            memcpy(text + used, entry, bytes);
        used += bytes;
    }
    return used;
}

bool params_decode_wire(const char *text, size_t length, struct chorus_params *values,
                        char *error, size_t error_size)
{
    bool seen[ARRAY_LENGTH(((struct param_set *)0)->sources)]; /* a flag per row */
    memset(seen, 0, sizeof seen);
    for (size_t at = 0; at < length;) {
        const char *entry = text + at;
        const char *end = memchr(entry, '\0', length - at);
        const char *equals = end != NULL ? memchr(entry, '=', (size_t)(end - entry)) : NULL;
        if (equals == NULL) {
            snprintf(error, error_size, "rank 0's parameters are not in this build's form "
                                        "(an entry without '=' or its end)");
            return false;
        }
        size_t index = 0;
        const struct param_definition *definition =
            param_find(entry, (size_t)(equals - entry), &index);
        if (definition == NULL || !(definition->flags & PARAM_SHAPES_WIRE)) {
            snprintf(error, error_size,
                     "rank 0 sends parameter %.*s, which this build %s: the ranks run "
                     "different builds of chorus",
                     (int)(equals - entry), entry,
                     definition == NULL ? "does not have" : "does not take from rank 0");
            return false;
        }
        char why[256];
        if (!param_store(values, definition, equals + 1, why, sizeof why)) {
            snprintf(error, error_size, "rank 0's %s=%s does not parse here (%s)",
                     definition->name, equals + 1, why);
            return false;
        }
        seen[index] = true;
        at = (size_t)(end - text) + 1;
    }
    for (size_t i = 0; i < param_count; i++)
        if ((param_table[i].flags & PARAM_SHAPES_WIRE) && !seen[i]) {
            snprintf(error, error_size,
                     "rank 0 does not send parameter %s: the ranks run different builds of "
                     "chorus", param_table[i].name);
            return false;
        }
    return true;
}

size_t params_adopt_rank0(struct param_set *set, const struct chorus_params *rank0)
{
    size_t changed = 0;
    for (size_t i = 0; i < param_count; i++) {
        if (!(param_table[i].flags & PARAM_SHAPES_WIRE))
            continue;
        char mine[PARAM_TEXT_LENGTH], theirs[PARAM_TEXT_LENGTH];
        params_format_value(&set->values, i, mine, sizeof mine);
        params_format_value(rank0, i, theirs, sizeof theirs);
        if (strcmp(mine, theirs) == 0)
            continue;
        LOG(LOG_WARNING, "params", "%s is %s here but %s on rank 0; using rank 0's value",
            param_table[i].name, mine, theirs);
        size_t offset = param_table[i].offset;
        memcpy((char *)&set->values + offset, (const char *)rank0 + offset,
               param_field_size(param_table[i].type));
        set->sources[i] = PARAM_SOURCE_RANK0;
        changed++;
    }
    return changed;
}

void params_format_value(const struct chorus_params *values, size_t index, char *text,
                         size_t text_size)
{
    const struct param_definition *definition = &param_table[index];
    const void *field = (const char *)values + definition->offset;
    switch (definition->type) {
    case PARAM_BYTES:
    case PARAM_COUNT:
    case PARAM_AREAS:
    case PARAM_CHUNK:
    case PARAM_SLOT:
        snprintf(text, text_size, "%zu", *(const size_t *)field);
        return;
    case PARAM_SECONDS:
    case PARAM_FRACTION:
        snprintf(text, text_size, "%g", *(const double *)field);
        return;
    case PARAM_LOG_LEVEL:
        snprintf(text, text_size, "%s", log_level_name((enum log_level) * (const int *)field));
        return;
    case PARAM_COMPRESSION:
        snprintf(text, text_size, "%s", dtype_compression_name(*(const int *)field));
        return;
    case PARAM_SWITCH:
        snprintf(text, text_size, "%s", *(const bool *)field ? "on" : "off");
        return;
    case PARAM_CHOICE:
        snprintf(text, text_size, "%s", definition->choices[*(const int *)field]);
        return;
    case PARAM_PATH:
    case PARAM_ALGORITHM:
        snprintf(text, text_size, "%s", (const char *)field);
        return;
    }
    snprintf(text, text_size, "?");
}

bool params_store_number(struct chorus_params *values, size_t index, double number)
{
    void *field = (char *)values + param_table[index].offset;
    switch (param_table[index].type) {
    case PARAM_BYTES:
    case PARAM_COUNT:
        *(size_t *)field = number <= 0 ? 0 : (size_t)number;
        return true;
    case PARAM_SECONDS:
        *(double *)field = number;
        return true;
    default:
        return false;
    }
}

double params_number(const struct chorus_params *values, size_t index)
{
    const void *field = (const char *)values + param_table[index].offset;
    switch (param_table[index].type) {
    case PARAM_BYTES:
    case PARAM_COUNT:
        return (double)*(const size_t *)field;
    case PARAM_SECONDS:
        return *(const double *)field;
    default:
        return 0;
    }
}
