/*
 * report.h — how the parts of the coordinator tell the loop (background.c) what happened, so
 * that the loop alone changes the thread's state: a fatal error (the first one counts), every
 * rank shutting down, or the end of this rank's messages. A part that reports stops what it
 * was doing and returns; the loop then acts (fails the handles, tells the other ranks, ends).
 */
#ifndef CHORUS_REPORT_H
#define CHORUS_REPORT_H

#include "../core/common.h"

/* The background thread's life. Only coord_enter (background.c) changes it. */
enum coord_state {
    COORD_RUNNING,  /* negotiating and running collectives */
    COORD_STOPPING, /* every rank shuts down: handles failed; rank 0 waits for every BYE */
    COORD_FINISHED, /* nothing more to send or receive: the loop ends */
    COORD_FAILED,   /* a fatal error: handles failed, the other ranks told; the loop ends */
};

struct coord_report {
    chorus_status failure;   /* CHORUS_OK, or the first fatal error */
    char failure_text[2048];
    bool shutdown;           /* every rank stops: fail what is left with shutdown_reason */
    char shutdown_reason[512];
    bool finished;           /* this rank has sent and received its last message */
};

/* Records a fatal error (the first one stays). Returns false, for `return report_fail(...)`. */
bool report_fail(struct coord_report *report, chorus_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
/* Records that every rank shuts down, for `reason`. */
void report_shutdown(struct coord_report *report, const char *reason);
/* Whether a part must stop what it does: something was reported that changes the state. */
bool report_pending(const struct coord_report *report);

#endif
