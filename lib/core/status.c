/*
 * status.c — status names and descriptions from the X-macro table in chorus.h, the thread-local
 * "last error" for calls that fail before a handle exists, small string helpers, and the
 * library's version.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char last_error_text[2048];

const char *chorus_status_name(chorus_status status)
{
    switch (status) {
#define CHORUS_STATUS_NAME_CASE(name, value, description)                                        \
    case name:                                                                                   \
        return #name;
        CHORUS_STATUS_TABLE(CHORUS_STATUS_NAME_CASE)
#undef CHORUS_STATUS_NAME_CASE
    }
    return "CHORUS_STATUS_UNKNOWN";
}

const char *chorus_status_description(chorus_status status)
{
    switch (status) {
#define CHORUS_STATUS_DESCRIPTION_CASE(name, value, description)                                 \
    case name:                                                                                   \
        return description;
        CHORUS_STATUS_TABLE(CHORUS_STATUS_DESCRIPTION_CASE)
#undef CHORUS_STATUS_DESCRIPTION_CASE
    }
    return "unknown status code";
}

const char *chorus_last_error(void)
{
    return last_error_text;
}

chorus_status set_last_error(chorus_status status, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(last_error_text, sizeof last_error_text, format, args);
    va_end(args);
    return status;
}

void clear_last_error(void)
{
    last_error_text[0] = '\0';
}

char *format_string_va(const char *format, va_list args)
{
    va_list copy;
    va_copy(copy, args);
    int length = vsnprintf(NULL, 0, format, copy);
    va_end(copy);
    if (length < 0)
        return NULL;
    char *text = malloc((size_t)length + 1);
    if (text != NULL)
        vsnprintf(text, (size_t)length + 1, format, args);
    return text;
}

char *format_string(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    char *text = format_string_va(format, args);
    va_end(args);
    return text;
}

void string_append(char **text, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    char *tail = format_string_va(format, args);
    va_end(args);
    if (tail == NULL)
        return;
    size_t old_length = *text ? strlen(*text) : 0;
    char *grown = realloc(*text, old_length + strlen(tail) + 1);
    if (grown != NULL) {
        memcpy(grown + old_length, tail, strlen(tail) + 1);
        *text = grown;
    }
    free(tail);
}

char *format_rank_list(const int *ranks, size_t count)
{
    char *text = format_string("%s", "");
    for (size_t i = 0; i < count;) {
        size_t run_end = i;
        while (run_end + 1 < count && ranks[run_end + 1] == ranks[run_end] + 1)
            run_end++;
        const char *separator = i == 0 ? "" : ",";
        if (run_end == i)
            string_append(&text, "%s%d", separator, ranks[i]);
        else
            string_append(&text, "%s%d-%d", separator, ranks[i], ranks[run_end]);
        i = run_end + 1;
    }
    return text;
}

double monotonic_seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

struct timespec clock_deadline(clockid_t clock, double seconds)
{
    struct timespec deadline;
    clock_gettime(clock, &deadline);
    long long nanoseconds = deadline.tv_nsec + (long long)(seconds * 1e9);
    deadline.tv_sec += (time_t)(nanoseconds / 1000000000LL);
    deadline.tv_nsec = (long)(nanoseconds % 1000000000LL);
    return deadline;
}

#define CHORUS_STRINGIFY(x) #x
#define CHORUS_VERSION_STRING(major, minor, patch)                                             \
    CHORUS_STRINGIFY(major) "." CHORUS_STRINGIFY(minor) "." CHORUS_STRINGIFY(patch)

const char *chorus_version(void)
{
    return CHORUS_VERSION_STRING(CHORUS_VERSION_MAJOR, CHORUS_VERSION_MINOR, CHORUS_VERSION_PATCH);
}
