/*
 * tuning_file.h — tuning files: rows of the selection table measured on the user's own hosts
 * (chorus-tune -o FILE writes one), read at init from CHORUS_TUNING_FILE and tried before the
 * built-in rows (select.c). The format, a line each:
 *
 *     chorus-tuning 1                      first line: the format and its version
 *     # a comment                          (blank lines too)
 *     COLLECTIVE ALGORITHM [CONDITION...] [# why: the measurement behind the row]
 *     setting NAME=VALUE [# why]          a parameter's value measured for these hosts
 *
 * CONDITIONs: bytes=LOW-HIGH (inclusive; either side may be left out; K, M, G suffixes are
 * powers of 1024), ranks=N or ranks=LOW-HIGH, local_ranks=N (ranks per host), placement=any,
 * shared-host or one-host, power_of_two (ranks). A row without conditions holds everywhere.
 * Settings name a parameter whose row in the parameter table has PARAM_TUNING_FILE (params_table.c);
 * they replace the parameter's default, and a value the user set (environment, HOROVOD_*
 * variable, chorus_init options) still wins.
 */
#ifndef CHORUS_TUNING_FILE_H
#define CHORUS_TUNING_FILE_H

#include "../collectives/algorithms.h"
#include "../core/params.h"

#define TUNING_FILE_LIMIT ((size_t)1 << 20) /* bytes */
#define TUNING_ROWS_LIMIT 1024

struct tuning_setting {
    int parameter;    /* index in param_table */
    char value[64];   /* as written; it parses */
    char *provenance; /* "FILE, line N: why", owned by the table */
};

struct tuning_table {
    struct selection_rule *rules; /* provenance strings owned by the table */
    size_t count;
    struct tuning_setting *settings;
    size_t setting_count;
};

/* Parses `text` (the contents of the file called `source`, for messages) into `table`. On a
 * malformed line returns CHORUS_ERR_BAD_PARAMETER with a message naming the file, the line and
 * what is wrong, and leaves `table` empty. */
chorus_status tuning_parse(const char *text, const char *source, struct tuning_table *table,
                           char *error, size_t error_size);

/* Reads the file at `path` (at most TUNING_FILE_LIMIT bytes) into a malloc'd text. */
chorus_status tuning_read_file(const char *path, char **text, size_t *length, char *error,
                               size_t error_size);

/* Puts the table's settings into `set` where `deciding[parameter]` (the sources that decide:
 * rank 0's at init, the set's own in chorus-info) says the parameter has its default, marking
 * them as from the tuning file; a value the user set stays. false (with `error`) where a value
 * does not parse, which tuning_parse has already ruled out. */
bool tuning_apply_settings(const struct tuning_table *table, struct param_set *set,
                           const enum param_source *deciding, char *error, size_t error_size);

void tuning_free(struct tuning_table *table);

#endif
