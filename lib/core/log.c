/*
 * log.c — one formatted line per call, written with a single fprintf so that lines of different
 * threads do not interleave.
 */
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int log_threshold = LOG_WARNING;
static int log_rank = -1;

static const char *const level_names[LOG_LEVEL_COUNT] = {"error", "warning", "info", "debug",
                                                         "trace"};

void log_set_rank(int rank)
{
    log_rank = rank;
}

void log_set_level(enum log_level level)
{
    log_threshold = (int)level;
}

const char *log_level_name(enum log_level level)
{
    return (int)level >= 0 && level < LOG_LEVEL_COUNT ? level_names[level] : "unknown";
}

bool log_level_parse(const char *text, enum log_level *level)
{
    for (int i = 0; i < LOG_LEVEL_COUNT; i++) {
        char digit[2] = {(char)('0' + i), '\0'};
        if (strcasecmp(text, level_names[i]) == 0 || strcmp(text, digit) == 0) {
            *level = (enum log_level)i;
            return true;
        }
    }
    if (strcasecmp(text, "warn") == 0) {
        *level = LOG_WARNING;
        return true;
    }
    return false;
}

void log_write(enum log_level level, const char *module, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    char *message = format_string_va(format, args);
    va_end(args);
    if (log_rank >= 0)
        fprintf(stderr, "chorus[rank %d] %s: %s%s\n", log_rank, module,
                level == LOG_WARNING ? "warning: " : level == LOG_ERROR ? "error: " : "",
                message ? message : format);
    else
        fprintf(stderr, "chorus %s: %s%s\n", module,
                level == LOG_WARNING ? "warning: " : level == LOG_ERROR ? "error: " : "",
                message ? message : format);
    free(message);
}
