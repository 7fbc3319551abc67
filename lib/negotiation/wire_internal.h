/*
 * wire_internal.h — the codec's writer and reader, shared by the files of the wire module:
 * wire.c (negotiation's messages, ordered records, the header every message starts with) and
 * wire_agreement.c (the messages by which ranks agree on settings). Integers travel
 * little-endian, written byte by byte; floats as their IEEE 754 bit patterns.
 */
#ifndef CHORUS_WIRE_INTERNAL_H
#define CHORUS_WIRE_INTERNAL_H

#include "wire.h"

/* Bytes being written. A failed write (out of memory, or past a fixed buffer) marks the writer
 * failed; later writes do nothing. */
struct wire_writer {
    uint8_t *data;
    size_t length;
    size_t capacity;
    bool fixed; /* data is the caller's, of `capacity` bytes: never grown */
    bool failed;
};

void wire_put_bytes(struct wire_writer *writer, const void *bytes, size_t count);
void wire_put_unsigned(struct wire_writer *writer, uint64_t value, size_t width);
void wire_put_double(struct wire_writer *writer, double value);
/* A length of `width` bytes, then the text without its '\0' (NULL: empty). */
void wire_put_text(struct wire_writer *writer, const char *text, size_t width);
/* The header drawn in wire.c: magic, version, kind, flags, count. */
void wire_put_header(struct wire_writer *writer, uint16_t kind, uint32_t flags, uint32_t count);
/* A grown writer's bytes into *bytes (malloc'd) and their length; 0 and NULL when it failed. */
size_t wire_writer_finish(struct wire_writer *writer, uint8_t **bytes);

/* Bytes being read. The first failure writes "malformed LABEL message at byte N of M: why"
 * into `error` (LABEL: `label`, or "negotiation"); later reads return zeros. */
struct wire_reader {
    const uint8_t *data;
    size_t length;
    size_t offset;
    char *error;
    size_t error_size;
    const char *label;
    bool failed;
};

/* Marks the reader failed with `what`; returns false. */
bool wire_fail(struct wire_reader *reader, const char *what);
uint64_t wire_get_unsigned(struct wire_reader *reader, size_t width);
double wire_get_double(struct wire_reader *reader);
/* A text written by wire_put_text, malloc'd; NULL when it failed (longer than `max_length`,
 * truncated, holding a '\0', or out of memory). */
char *wire_get_text(struct wire_reader *reader, size_t width, size_t max_length);
/* Reads the header; false when it is cut short or its magic or version is not this build's. */
bool wire_get_header(struct wire_reader *reader, uint16_t *kind, uint32_t *flags, uint32_t *count);

#endif
