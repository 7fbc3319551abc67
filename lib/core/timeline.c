/*
 * timeline.c — see timeline.h. Events go to a stdio buffer; every flush ends the file with
 * "]" and moves back before it, so that the file is a complete JSON array whenever the program
 * stops, even without chorus_shutdown. Each tensor gets its own row (a "thread" of the trace),
 * named by a metadata event the first time the tensor appears.
 */
#include "timeline.h"

#include "name_table.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct timeline {
    FILE *file;
    double origin;
    struct name_table rows; /* tensor name -> row number + 1 */
    size_t row_count;
    bool first_event;
    char path[4096];
};

/* The length of the valid UTF-8 sequence at `c` (1-4), or 0 when it is not one. */
static size_t utf8_sequence(const unsigned char *c)
{
    size_t length = c[0] < 0x80             ? 1
                    : (c[0] & 0xe0) == 0xc0 ? 2
                    : (c[0] & 0xf0) == 0xe0 ? 3
                    : (c[0] & 0xf8) == 0xf0 ? 4
                                            : 0;
    for (size_t i = 1; i < length; i++)
        if ((c[i] & 0xc0) != 0x80)
            return 0;
    /* Overlong forms and surrogates are not valid either. */
    if ((length == 2 && c[0] < 0xc2) || (length == 3 && c[0] == 0xe0 && c[1] < 0xa0) ||
        (length == 3 && c[0] == 0xed && c[1] >= 0xa0) || (length == 4 && c[0] == 0xf0 &&
                                                          c[1] < 0x90) ||
        (length == 4 && (c[0] > 0xf4 || (c[0] == 0xf4 && c[1] >= 0x90))))
        return 0;
    return length;
}

/* A JSON string of `text`. Tensor names are bytes: a byte that is not part of valid UTF-8 is
 * written as the code point of the same value (\u00XX), so that the file still loads. */
static void write_json_string(FILE *file, const char *text)
{
    fputc('"', file);
    for (const unsigned char *c = (const unsigned char *)text; *c;) {
        size_t length = utf8_sequence(c);
        if (*c == '"' || *c == '\\')
            fprintf(file, "\\%c", *c);
        else if (*c < 0x20 || length == 0)
            fprintf(file, "\\u%04x", *c);
        else
            fwrite(c, 1, length, file);
        c += length ? length : 1;
    }
    fputc('"', file);
}

/* Paths this process has written a timeline to: a later init (or start) with the same path
 * writes beside it ("trace.1.json"), instead of truncating what the earlier one recorded. */
static pthread_mutex_t written_lock = PTHREAD_MUTEX_INITIALIZER;
static struct name_table written;
static bool written_ready;

/* `path`, or the first "stem.N.extension" this process has not written yet, in `chosen`. */
static void choose_path(const char *path, char *chosen, size_t chosen_size)
{
    pthread_mutex_lock(&written_lock);
    if (!written_ready) {
        name_table_init(&written);
        written_ready = true;
    }
    snprintf(chosen, chosen_size, "%s", path);
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(path, '.');
    size_t stem = dot != NULL && (slash == NULL || dot > slash) ? (size_t)(dot - path)
                                                                 : strlen(path);
    for (unsigned n = 1; name_table_find(&written, 0, chosen) != NULL; n++)
        snprintf(chosen, chosen_size, "%.*s.%u%s", (int)stem, path, n, path + stem);
    name_table_insert(&written, 0, chosen, (void *)1);
    pthread_mutex_unlock(&written_lock);
}

struct timeline *timeline_open(const char *path, char *error, size_t error_size)
{
    struct timeline *timeline = calloc(1, sizeof *timeline);
    if (timeline == NULL)
        return NULL;
    char chosen[4096];
    choose_path(path, chosen, sizeof chosen);
    timeline->file = fopen(chosen, "w");
    if (timeline->file == NULL) {
        snprintf(error, error_size, "cannot write the timeline to %s", chosen);
        free(timeline);
        return NULL;
    }
    snprintf(timeline->path, sizeof timeline->path, "%s", chosen);
    timeline->origin = clock_seconds();
    timeline->first_event = true;
    name_table_init(&timeline->rows);
    fputs("[\n", timeline->file);
    timeline_flush(timeline);
    return timeline;
}

static void begin_event(struct timeline *timeline)
{
    if (!timeline->first_event)
        fputs(",\n", timeline->file);
    timeline->first_event = false;
}

/* A tensor's row, labelled with its name, and its set where it has one. */
static size_t row_of(struct timeline *timeline, int set, const char *tensor)
{
    uintptr_t row = (uintptr_t)name_table_find(&timeline->rows, set, tensor);
    if (row != 0)
        return row - 1;
    row = ++timeline->row_count;
    name_table_insert(&timeline->rows, set, tensor, (void *)row);
    begin_event(timeline);
    fprintf(timeline->file, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %zu, "
                            "\"args\": {\"name\": ",
            (size_t)row - 1);
    char *label = set != 0 ? text_format("%s (process set %d)", tensor, set) : NULL;
    write_json_string(timeline->file, label != NULL ? label : tensor);
    free(label);
    fputs("}}", timeline->file);
    return (size_t)row - 1;
}

void timeline_span(struct timeline *timeline, int set, const char *tensor, const char *phase,
                   double start, double end, const char *arguments)
{
    if (timeline == NULL)
        return;
    size_t row = row_of(timeline, set, tensor);
    begin_event(timeline);
    fprintf(timeline->file, "{\"name\": ");
    write_json_string(timeline->file, phase);
    fprintf(timeline->file, ", \"ph\": \"X\", \"pid\": 0, \"tid\": %zu, \"ts\": %.3f, \"dur\": %.3f",
            row, (start - timeline->origin) * 1e6, (end > start ? end - start : 0) * 1e6);
    if (arguments != NULL)
        fprintf(timeline->file, ", \"args\": {%s}", arguments);
    fputc('}', timeline->file);
}

struct timeline_mark *timeline_mark_new(const char *row, const char *label, double start,
                                        double end)
{
    struct timeline_mark *mark = calloc(1, sizeof *mark);
    if (mark == NULL)
        return NULL;
    *mark = (struct timeline_mark){.start = start, .end = end, .row = strdup(row),
                                   .label = strdup(label)};
    if (mark->row == NULL || mark->label == NULL) {
        timeline_mark_free(mark);
        return NULL;
    }
    return mark;
}

void timeline_mark_free(struct timeline_mark *mark)
{
    if (mark == NULL)
        return;
    free(mark->row);
    free(mark->label);
    free(mark);
}

const char *timeline_path(const struct timeline *timeline)
{
    return timeline->path;
}

void timeline_flush(struct timeline *timeline)
{
    if (timeline == NULL)
        return;
    fputs("\n]\n", timeline->file);
    fflush(timeline->file);
    fseek(timeline->file, -3, SEEK_END);
}

void timeline_close(struct timeline *timeline)
{
    if (timeline == NULL)
        return;
    timeline_flush(timeline);
    fclose(timeline->file);
    name_table_destroy(&timeline->rows);
    free(timeline);
}
