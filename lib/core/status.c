/*
 * status.c — status names and descriptions from the X-macro table in chorus.h, the thread-local
 * "last error" for calls that fail before a handle exists, and the library's version.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

chorus_status status_set_last_error(chorus_status status, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(last_error_text, sizeof last_error_text, format, args);
    va_end(args);
    return status;
}

void status_clear_last_error(void)
{
    last_error_text[0] = '\0';
}

#define CHORUS_STRINGIFY(x) #x
#define CHORUS_VERSION_STRING(major, minor, patch)                                             \
    CHORUS_STRINGIFY(major) "." CHORUS_STRINGIFY(minor) "." CHORUS_STRINGIFY(patch)

const char *chorus_version(void)
{
    return CHORUS_VERSION_STRING(CHORUS_VERSION_MAJOR, CHORUS_VERSION_MINOR, CHORUS_VERSION_PATCH);
}
