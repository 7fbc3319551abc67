/*
 * log.c — one formatted line per call, written with a single fprintf so that lines of different
 * threads do not interleave: "2026-11-24T07:43:01.123Z chorus[rank 0 host vm] WARNING stall: ...",
 * the time in UTC so that lines of different hosts sort together.
 */
#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

_Atomic int log_threshold = LOG_WARNING;
static _Atomic int log_rank = -1;
static char log_host[64] = "?";

static const char *const level_names[LOG_LEVEL_COUNT] = {"error", "warning", "info", "debug",
                                                         "trace"};
static const char *const level_tags[LOG_LEVEL_COUNT] = {"ERROR", "WARNING", "INFO", "DEBUG",
                                                        "TRACE"};

/* The host as this process sees it (emulated hosts have a UTS namespace each). */
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void learn_host(void)
{
    if (gethostname(log_host, sizeof log_host) != 0)
        snprintf(log_host, sizeof log_host, "?");
    log_host[sizeof log_host - 1] = '\0';
}

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
    if (strcasecmp(text, "fatal") == 0) { /* Horovod's most severe level */
        *level = LOG_ERROR;
        return true;
    }
    return false;
}

void log_write(enum log_level level, const char *module, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    char *message = text_format_va(format, args);
    va_end(args);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm utc;
    gmtime_r(&now.tv_sec, &utc);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
    pthread_once(&host_once, learn_host);
    char where[96];
    int rank = log_rank;
    if (rank >= 0)
        snprintf(where, sizeof where, "rank %d host %s", rank, log_host);
    else
        snprintf(where, sizeof where, "host %s", log_host);
    fprintf(stderr, "%s.%03ldZ chorus[%s] %s %s: %s\n", stamp, now.tv_nsec / 1000000, where,
            level_tags[(int)level >= 0 && level < LOG_LEVEL_COUNT ? level : LOG_ERROR], module,
            message ? message : format);
    free(message);
}
