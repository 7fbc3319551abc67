/*
 * timeline.h — rank 0's record of what happened to every tensor, as a Chrome trace (the JSON
 * array format that Perfetto and chrome://tracing load): one row per tensor, with a span per
 * phase (negotiation, queue, copy in, the collective, copy out). Enabled by CHORUS_TIMELINE.
 */
#ifndef CHORUS_TIMELINE_H
#define CHORUS_TIMELINE_H

#include "common.h"

struct timeline;

/* Opens (truncates) `path`, or, when this process already wrote a timeline there (a second init),
 * "stem.N.extension" beside it; NULL with the reason in `error` when it cannot be written. */
struct timeline *timeline_open(const char *path, char *error, size_t error_size);
void timeline_close(struct timeline *timeline);
/* The file it writes. */
const char *timeline_path(const struct timeline *timeline);

/* A span of `phase` for `tensor` of process set `set` (0: the job's) from `start` to `end`
 * (clock_seconds()). `arguments` is a JSON object body without braces, such as
 * "\"algorithm\": \"ring\"", or NULL. */
void timeline_span(struct timeline *timeline, int set, const char *tensor, const char *phase,
                   double start, double end, const char *arguments);

/* A span the user recorded with chorus_timeline_mark, on its way to the background thread. */
struct timeline_mark {
    struct timeline_mark *next;
    double start, end; /* clock_seconds() */
    char *row;
    char *label;
};

/* A mark with copies of `row` and `label`; NULL when out of memory. */
struct timeline_mark *timeline_mark_new(const char *row, const char *label, double start,
                                        double end);
void timeline_mark_free(struct timeline_mark *mark);

/* Writes what is buffered; the file is valid JSON after every flush. */
void timeline_flush(struct timeline *timeline);

#endif
