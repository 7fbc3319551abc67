/*
 * report.c — see report.h.
 */
#include "report.h"

#include <stdarg.h>
#include <stdio.h>

bool report_fail(struct coord_report *report, chorus_status status, const char *format, ...)
{
    if (report->failure != CHORUS_OK)
        return false;
    report->failure = status;
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(report->failure_text, sizeof report->failure_text, format, arguments);
    va_end(arguments);
    return false;
}

void report_shutdown(struct coord_report *report, const char *reason)
{
    if (report->shutdown)
        return;
    report->shutdown = true;
    snprintf(report->shutdown_reason, sizeof report->shutdown_reason, "%s", reason);
}

bool report_pending(const struct coord_report *report)
{
    return report->failure != CHORUS_OK || report->shutdown || report->finished;
}
