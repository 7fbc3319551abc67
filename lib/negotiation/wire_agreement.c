/*
 * wire_agreement.c — encoding and decoding of the agreement's messages (struct wire_agreement in
 * wire.h), with the writer and reader of wire.c. Each starts with wire.c's header: its kind, flags
 * 0 and a count of 1 (one body). Then, by kind:
 *
 * WIRE_PARAMETERS (rank 0 -> every rank at init: the values that shape the wire):
 *   +-------------+-------------------------------------------------+
 *   | form_length | form: "NAME=value\0" per row (params_encode_wire) |
 *   | u32         | ...                                             |
 *   +-------------+-------------------------------------------------+
 *
 * WIRE_VERDICT (at init: a rank's outcome -> rank 0; the first failure -> every rank):
 *   +------+--------+-------------+---------+
 *   | rank | status | message_len | message |
 *   | i32  | i32    | u32         | ...     |
 *   +------+--------+-------------+---------+
 *
 * WIRE_TUNING_FILE (rank 0 -> every rank at init: its reading of CHORUS_TUNING_FILE and where
 * its parameters came from, which decides which of the file's settings apply):
 *   +--------+-------------+---------+----------+------+--------------+---------+
 *   | status | message_len | message | text_len | text | source_count | sources |
 *   | i32    | u32         | ...     | u32      | ...  | u8           | u8 each |
 *   +--------+-------------+---------+----------+------+--------------+---------+
 *
 * WIRE_DIGEST (each rank -> rank 0 at init: its own copy's digest, 0 for none):
 *   +--------+
 *   | digest |
 *   | u64    |
 *   +--------+
 *
 * WIRE_AUTOTUNE (rank 0 -> every rank at the end of each trial):
 *   +-------+---------+---------------+----------+
 *   | trial | settled | setting_count | settings |
 *   | u32   | u8      | u8            | f64 each |
 *   +-------+---------+---------------+----------+
 */
#include "wire_internal.h"

#include "../core/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MESSAGE_MAX 4096 /* a failure's text: init's are at most 1 KiB */

/* Bytes that may hold '\0': a length, then the bytes. */
static void put_block(struct wire_writer *writer, const char *text, size_t length)
{
    wire_put_unsigned(writer, length, 4);
    wire_put_bytes(writer, text, length);
}

static bool put_body(struct wire_writer *writer, const struct wire_agreement *message)
{
    switch (message->kind) {
    case WIRE_PARAMETERS:
        if (message->length > WIRE_AGREEMENT_TEXT_MAX)
            return false;
        put_block(writer, message->text, message->length);
        return true;
    case WIRE_VERDICT:
        wire_put_unsigned(writer, (uint32_t)message->rank, 4);
        wire_put_unsigned(writer, (uint32_t)message->status, 4);
        wire_put_text(writer, message->message, 4);
        return true;
    case WIRE_TUNING_FILE:
        if (message->length > WIRE_AGREEMENT_TEXT_MAX || message->source_count > WIRE_SOURCES_MAX)
            return false;
        wire_put_unsigned(writer, (uint32_t)message->status, 4);
        wire_put_text(writer, message->message, 4);
        put_block(writer, message->text, message->length);
        wire_put_unsigned(writer, message->source_count, 1);
        wire_put_bytes(writer, message->sources, message->source_count);
        return true;
    case WIRE_DIGEST:
        wire_put_unsigned(writer, message->digest, 8);
        return true;
    case WIRE_AUTOTUNE:
        if (message->setting_count > WIRE_AUTOTUNE_SETTINGS_MAX)
            return false;
        wire_put_unsigned(writer, message->trial, 4);
        wire_put_unsigned(writer, message->settled ? 1 : 0, 1);
        wire_put_unsigned(writer, message->setting_count, 1);
        for (size_t i = 0; i < message->setting_count; i++)
            wire_put_double(writer, message->settings[i]);
        return true;
    }
    return false;
}

size_t wire_agreement_encode(const struct wire_agreement *message, uint8_t **bytes)
{
    struct wire_writer writer = {0};
    wire_put_header(&writer, message->kind, 0, 1);
    if (!put_body(&writer, message))
        writer.failed = true;
    return wire_writer_finish(&writer, bytes);
}

/* Bytes written by put_block, malloc'd with a '\0' after them; NULL when it failed. */
static char *get_block(struct wire_reader *reader, size_t *length)
{
    *length = (size_t)wire_get_unsigned(reader, 4);
    if (reader->failed)
        return NULL;
    if (*length > WIRE_AGREEMENT_TEXT_MAX) {
        wire_fail(reader, "text too long");
        return NULL;
    }
    if (reader->length - reader->offset < *length) {
        wire_fail(reader, "truncated text");
        return NULL;
    }
    char *text = malloc(*length + 1);
    if (text == NULL) {
        wire_fail(reader, "out of memory");
        return NULL;
    }
    if (*length != 0)
        memcpy(text, reader->data + reader->offset, *length);
    text[*length] = '\0';
    reader->offset += *length;
    return text;
}

/* A status that travels: CHORUS_OK or an error, never CHORUS_IN_PROGRESS. */
static int32_t get_status(struct wire_reader *reader)
{
    int32_t status = (int32_t)(uint32_t)wire_get_unsigned(reader, 4);
    if (!reader->failed && status > CHORUS_OK)
        wire_fail(reader, "a status that is neither success nor an error");
    return status;
}

static bool get_body(struct wire_reader *reader, struct wire_agreement *message)
{
    switch (message->kind) {
    case WIRE_PARAMETERS:
        message->text = get_block(reader, &message->length);
        break;
    case WIRE_VERDICT:
        message->rank = (int32_t)(uint32_t)wire_get_unsigned(reader, 4);
        if (!reader->failed && message->rank < -1)
            return wire_fail(reader, "negative rank");
        message->status = get_status(reader);
        message->message = wire_get_text(reader, 4, MESSAGE_MAX);
        break;
    case WIRE_TUNING_FILE:
        message->status = get_status(reader);
        message->message = wire_get_text(reader, 4, MESSAGE_MAX);
        message->text = get_block(reader, &message->length);
        message->source_count = (size_t)wire_get_unsigned(reader, 1);
        if (!reader->failed && message->source_count > WIRE_SOURCES_MAX)
            return wire_fail(reader, "more parameter sources than there are parameters");
        for (size_t i = 0; i < message->source_count && !reader->failed; i++) {
            message->sources[i] = (uint8_t)wire_get_unsigned(reader, 1);
            if (!reader->failed && message->sources[i] > PARAM_SOURCE_TUNING_FILE) /* the last */
                return wire_fail(reader, "unknown parameter source");
        }
        break;
    case WIRE_DIGEST:
        message->digest = wire_get_unsigned(reader, 8);
        break;
    case WIRE_AUTOTUNE: {
        message->trial = (uint32_t)wire_get_unsigned(reader, 4);
        uint8_t settled = (uint8_t)wire_get_unsigned(reader, 1);
        message->setting_count = (size_t)wire_get_unsigned(reader, 1);
        if (!reader->failed && settled > 1)
            return wire_fail(reader, "settled is neither 0 nor 1");
        if (!reader->failed && message->setting_count > WIRE_AUTOTUNE_SETTINGS_MAX)
            return wire_fail(reader, "more settings than autotune tries");
        message->settled = settled == 1;
        for (size_t i = 0; i < message->setting_count; i++)
            message->settings[i] = wire_get_double(reader);
        break;
    }
    default:
        return wire_fail(reader, "not a kind of the agreement's");
    }
    return !reader->failed;
}

chorus_status wire_agreement_decode(const uint8_t *bytes, size_t length, uint16_t kind,
                                    struct wire_agreement *message, char *error, size_t error_size)
{
    struct wire_reader reader = {.data = bytes,
                                 .length = length,
                                 .error = error,
                                 .error_size = error_size,
                                 .label = wire_kind_name(kind)};
    *message = (struct wire_agreement){.kind = kind};
    uint16_t found = 0;
    uint32_t flags = 0, count = 0;
    if (!wire_get_header(&reader, &found, &flags, &count))
        return CHORUS_ERR_PROTOCOL;
    char why[96];
    if (found != kind)
        snprintf(why, sizeof why, "a %s message (kind %u) instead", wire_kind_name(found), found);
    else if (flags != 0 || count != 1)
        snprintf(why, sizeof why, "flags %u and count %u, where 0 and 1 belong", (unsigned)flags,
                 (unsigned)count);
    if (found != kind || flags != 0 || count != 1) {
        wire_fail(&reader, why);
        return CHORUS_ERR_PROTOCOL;
    }
    if (get_body(&reader, message) && reader.offset != length)
        wire_fail(&reader, "trailing bytes");
    if (reader.failed) {
        wire_agreement_free(message);
        return CHORUS_ERR_PROTOCOL;
    }
    return CHORUS_OK;
}

void wire_agreement_free(struct wire_agreement *message)
{
    free(message->message);
    free(message->text);
    *message = (struct wire_agreement){.kind = message->kind};
}
