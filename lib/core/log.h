/*
 * log.h — chorus's log lines on stderr: "TIME chorus[rank N host H] LEVEL module: message". The
 * level comes from CHORUS_LOG_LEVEL; the rank (and host) are set once the rank is known.
 */
#ifndef CHORUS_LOG_H
#define CHORUS_LOG_H

#include "common.h"

enum log_level { LOG_ERROR = 0, LOG_WARNING = 1, LOG_INFO = 2, LOG_DEBUG = 3, LOG_TRACE = 4 };
#define LOG_LEVEL_COUNT 5

/* Atomic: ranks run as threads of one process in the unit tests, each setting it at start. */
extern _Atomic int log_threshold;

void log_set_rank(int rank);
void log_set_level(enum log_level level);
const char *log_level_name(enum log_level level);
/* Parses "error", "warning", "info", "debug", "trace" (or 0..4), and "warn", and Horovod's
 * "fatal" as error; false if none matches. */
bool log_level_parse(const char *text, enum log_level *level);
void log_write(enum log_level level, const char *module, const char *format, ...)
    CHORUS_PRINTF(3, 4);

#define LOG(level, module, ...)                                                                  \
    do {                                                                                         \
        if ((int)(level) <= log_threshold)                                                       \
            log_write(level, module, __VA_ARGS__);                                               \
    } while (0)

#endif
