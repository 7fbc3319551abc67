/*
 * timeline.c — see timeline.h. Events go to a stdio buffer; every flush ends the file with
 * "]" and moves back before it, so that the file is a complete JSON array whenever the program
 * stops, even without chorus_shutdown. Each tensor gets its own row (a "thread" of the trace),
 * named by a metadata event the first time the tensor appears.
 */
#include "timeline.h"

#include "name_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct timeline {
    FILE *file;
    double origin;
    struct name_table rows; /* tensor name -> row number + 1 */
    size_t row_count;
    bool first_event;
};

static void write_json_string(FILE *file, const char *text)
{
    fputc('"', file);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(file, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(file, "\\u%04x", *c);
        else
            fputc(*c, file);
    }
    fputc('"', file);
}

struct timeline *timeline_open(const char *path, char *error, size_t error_size)
{
    struct timeline *timeline = calloc(1, sizeof *timeline);
    if (timeline == NULL)
        return NULL;
    timeline->file = fopen(path, "w");
    if (timeline->file == NULL) {
        snprintf(error, error_size, "cannot write the timeline to %s", path);
        free(timeline);
        return NULL;
    }
    timeline->origin = monotonic_seconds();
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

static size_t row_of(struct timeline *timeline, const char *tensor)
{
    uintptr_t row = (uintptr_t)name_table_find(&timeline->rows, tensor);
    if (row != 0)
        return row - 1;
    row = ++timeline->row_count;
    name_table_insert(&timeline->rows, tensor, (void *)row);
    begin_event(timeline);
    fprintf(timeline->file, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %zu, "
                            "\"args\": {\"name\": ",
            (size_t)row - 1);
    write_json_string(timeline->file, tensor);
    fputs("}}", timeline->file);
    return (size_t)row - 1;
}

void timeline_span(struct timeline *timeline, const char *tensor, const char *phase, double start,
                   double end, const char *arguments)
{
    if (timeline == NULL)
        return;
    size_t row = row_of(timeline, tensor);
    begin_event(timeline);
    fprintf(timeline->file, "{\"name\": ");
    write_json_string(timeline->file, phase);
    fprintf(timeline->file, ", \"ph\": \"X\", \"pid\": 0, \"tid\": %zu, \"ts\": %.3f, \"dur\": %.3f",
            row, (start - timeline->origin) * 1e6, (end > start ? end - start : 0) * 1e6);
    if (arguments != NULL)
        fprintf(timeline->file, ", \"args\": {%s}", arguments);
    fputc('}', timeline->file);
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
