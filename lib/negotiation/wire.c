/*
 * wire.c — encoding and decoding of negotiation messages. All integers are little-endian,
 * written byte by byte, so the format does not depend on the host; floats travel as their
 * IEEE 754 bit patterns.
 *
 * Message (the header, up to count, starts every message between ranks: those of
 * wire_agreement.c too, with their own kinds):
 *   +--------+---------+------+-------+-------+------------------------+
 *   | magic  | version | kind | flags | count | count x (request|resp.)|
 *   | u32    | u16     | u16  | u32   | u32   |                        |
 *   +--------+---------+------+-------+-------+------------------------+
 *
 * Request (form 0, in full; form 1 is followed only by a u32 response-cache slot). After the
 * form byte come the rows of negotiated_fields.c in its order, each as its encoding says:
 *   +------+----------+------+------------+-------------+--------------+-------------+-------+
 *   | form | name_len | name | collective | process_set | member_count | members     | dtype |
 *   | u8   | u16      | ...  | u8         | i32         | u32          | i32 each    | u8    |
 *   +------+----------+------+------------+-------------+--------------+-------------+-------+
 *   +--------+-------+--------------+----+------+----------+-----------+-------------+
 *   | device | ndims | shape[ndims] | op | root | prescale | postscale | compression |
 *   | i32    | u8    | i64 each     | u8 | i32  | f64      | f64       | u8          |
 *   +--------+-------+--------------+----+------+----------+-----------+-------------+
 *   +-------------------+
 *   | compression_ratio |
 *   | f64               |
 *   +-------------------+
 *   +-----------+-------+------------+------------+----------------+
 *   | group_len | group | group_size | even_split | in_shared_heap |
 *   | u16       | ...   | u32        | u8         | u8             |
 *   +-----------+-------+------------+------------+----------------+
 *
 * Response (type 4, RESPONSE_CACHED, is followed only by a u32 response-cache slot):
 *   +------+--------+--------------+-------------+---------+---------+-----------+------------+
 *   | type | status | contributors | message_len | message | request | dim_count | dims       |
 *   | u8   | i32    | u32          | u32         | ...     | (above) | u32       | i64 each   |
 *   +------+--------+--------------+-------------+---------+---------+-----------+------------+
 *   +------------+-----------+------------------+
 *   | mask_count | rank_mask | last_joined_rank |
 *   | u32        | u8 each   | i32              |
 *   +------------+-----------+------------------+
 *
 * Ordered record (WIRE_ORDERED_RECORD_BYTES, zero-padded; the members of an ordered operation
 * exchange one each in an allgather, ordered.c): the member's position in the set's order, the
 * request in form 0 without its name and group (empty) and members (none):
 *   +--------+----------+-------------+-------+
 *   | magic  | position | request_len | request (form 0, above) | zeros to the end
 *   | u32    | u64      | u16         |                          |
 *   +--------+----------+-------------+-------+
 */
#include "wire_internal.h"

#include "negotiated_fields.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGE_LENGTH (1u << 20)
#define MAX_FIRST_DIMS (1u << 24)

void wire_put_bytes(struct wire_writer *writer, const void *bytes, size_t count)
{
    if (writer->failed)
        return;
    if (writer->length + count > writer->capacity && writer->fixed) {
        writer->failed = true;
        return;
    }
    if (writer->length + count > writer->capacity) {
        size_t capacity = writer->capacity ? writer->capacity : 256;
        while (capacity < writer->length + count)
            capacity *= 2;
        uint8_t *grown = realloc(writer->data, capacity);
        if (grown == NULL) {
            writer->failed = true;
            return;
        }
        writer->data = grown;
        writer->capacity = capacity;
    }
    if (count != 0)
        memcpy(writer->data + writer->length, bytes, count);
    writer->length += count;
}

void wire_put_unsigned(struct wire_writer *writer, uint64_t value, size_t width)
{
    uint8_t bytes[8];
    for (size_t i = 0; i < width; i++)
        bytes[i] = (uint8_t)(value >> (8 * i));
    wire_put_bytes(writer, bytes, width);
}

void wire_put_double(struct wire_writer *writer, double value)
{
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    wire_put_unsigned(writer, bits, 8);
}

void wire_put_text(struct wire_writer *writer, const char *text, size_t width)
{
    size_t length = text ? strlen(text) : 0;
    wire_put_unsigned(writer, length, width);
    wire_put_bytes(writer, text, length);
}

#define FIELD_AT(type, request, field) ((type *)((char *)(request) + (field)->offset))

static void put_field(struct wire_writer *writer, const struct wire_request *request,
                      const struct negotiated_field *field)
{
    struct wire_request *r = (struct wire_request *)request; /* read only */
    switch (field->encoding) {
    case FIELD_VIRTUAL:
        return;
    case FIELD_U8:
        wire_put_unsigned(writer, *FIELD_AT(uint8_t, r, field), 1);
        return;
    case FIELD_I32:
        wire_put_unsigned(writer, (uint32_t)*FIELD_AT(int32_t, r, field), 4);
        return;
    case FIELD_U32:
        wire_put_unsigned(writer, *FIELD_AT(uint32_t, r, field), 4);
        return;
    case FIELD_F64:
        wire_put_double(writer, *FIELD_AT(double, r, field));
        return;
    case FIELD_TEXT:
        wire_put_text(writer, *FIELD_AT(char *, r, field), 2);
        return;
    case FIELD_SHAPE:
        wire_put_unsigned(writer, r->ndims, 1);
        for (size_t i = 0; i < r->ndims; i++)
            wire_put_unsigned(writer, (uint64_t)r->shape[i], 8);
        return;
    case FIELD_MEMBERS:
        wire_put_unsigned(writer, r->member_count, 4);
        for (size_t i = 0; i < r->member_count; i++)
            wire_put_unsigned(writer, (uint32_t)r->members[i], 4);
        return;
    }
}

static void put_request(struct wire_writer *writer, const struct wire_request *request)
{
    wire_put_unsigned(writer, request->cached ? 1 : 0, 1);
    if (request->cached) {
        wire_put_unsigned(writer, request->cache_slot, 4);
        return;
    }
    for (size_t i = 0; i < negotiated_field_count; i++)
        put_field(writer, request, &negotiated_fields[i]);
}

static void put_response(struct wire_writer *writer, const struct wire_response *response)
{
    wire_put_unsigned(writer, response->type, 1);
    if (response->type == RESPONSE_CACHED) {
        wire_put_unsigned(writer, response->request.cache_slot, 4);
        return;
    }
    wire_put_unsigned(writer, (uint32_t)response->status, 4);
    wire_put_unsigned(writer, response->contributors, 4);
    wire_put_text(writer, response->message, 4);
    put_request(writer, &response->request);
    wire_put_unsigned(writer, response->first_dim_count, 4);
    for (size_t i = 0; i < response->first_dim_count; i++)
        wire_put_unsigned(writer, (uint64_t)response->first_dims[i], 8);
    wire_put_unsigned(writer, response->rank_mask_count, 4);
    wire_put_bytes(writer, response->rank_mask, response->rank_mask_count);
    wire_put_unsigned(writer, (uint32_t)response->last_joined_rank, 4);
}

void wire_put_header(struct wire_writer *writer, uint16_t kind, uint32_t flags, uint32_t count)
{
    wire_put_unsigned(writer, WIRE_MAGIC, 4);
    wire_put_unsigned(writer, WIRE_VERSION, 2);
    wire_put_unsigned(writer, kind, 2);
    wire_put_unsigned(writer, flags, 4);
    wire_put_unsigned(writer, count, 4);
}

size_t wire_writer_finish(struct wire_writer *writer, uint8_t **bytes)
{
    if (writer->failed) {
        free(writer->data);
        *bytes = NULL;
        return 0;
    }
    *bytes = writer->data;
    return writer->length;
}

size_t wire_encode(const struct wire_message *message, uint8_t **bytes)
{
    struct wire_writer writer = {0};
    wire_put_header(&writer, message->kind, message->flags, message->count);
    for (size_t i = 0; i < message->count; i++) {
        if (message->kind == WIRE_REQUESTS)
            put_request(&writer, &message->requests[i]);
        else
            put_response(&writer, &message->responses[i]);
    }
    return wire_writer_finish(&writer, bytes);
}

bool wire_fail(struct wire_reader *reader, const char *what)
{
    if (!reader->failed)
        snprintf(reader->error, reader->error_size, "malformed %s message at byte %zu of %zu: %s",
                 reader->label != NULL ? reader->label : "negotiation", reader->offset,
                 reader->length, what);
    reader->failed = true;
    return false;
}

uint64_t wire_get_unsigned(struct wire_reader *reader, size_t width)
{
    if (reader->failed)
        return 0;
    if (reader->length - reader->offset < width) {
        wire_fail(reader, "truncated");
        return 0;
    }
    uint64_t value = 0;
    for (size_t i = 0; i < width; i++)
        value |= (uint64_t)reader->data[reader->offset + i] << (8 * i);
    reader->offset += width;
    return value;
}

double wire_get_double(struct wire_reader *reader)
{
    uint64_t bits = wire_get_unsigned(reader, 8);
    double value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

char *wire_get_text(struct wire_reader *reader, size_t width, size_t max_length)
{
    size_t length = (size_t)wire_get_unsigned(reader, width);
    if (reader->failed)
        return NULL;
    if (length > max_length) {
        wire_fail(reader, "text too long");
        return NULL;
    }
    if (reader->length - reader->offset < length) {
        wire_fail(reader, "truncated text");
        return NULL;
    }
    if (memchr(reader->data + reader->offset, '\0', length) != NULL) {
        wire_fail(reader, "text contains a zero byte");
        return NULL;
    }
    char *text = malloc(length + 1);
    if (text == NULL) {
        wire_fail(reader, "out of memory");
        return NULL;
    }
    memcpy(text, reader->data + reader->offset, length);
    text[length] = '\0';
    reader->offset += length;
    return text;
}

bool wire_get_header(struct wire_reader *reader, uint16_t *kind, uint32_t *flags, uint32_t *count)
{
    uint32_t magic = (uint32_t)wire_get_unsigned(reader, 4);
    uint16_t version = (uint16_t)wire_get_unsigned(reader, 2);
    *kind = (uint16_t)wire_get_unsigned(reader, 2);
    *flags = (uint32_t)wire_get_unsigned(reader, 4);
    *count = (uint32_t)wire_get_unsigned(reader, 4);
    if (reader->failed)
        return false;
    if (magic != WIRE_MAGIC)
        return wire_fail(reader, "bad magic number");
    if (version != WIRE_VERSION) {
        char why[96];
        snprintf(why, sizeof why, "version %u, expected %u (the ranks run different builds)",
                 version, WIRE_VERSION);
        return wire_fail(reader, why);
    }
    return true;
}

const char *wire_kind_name(unsigned kind)
{
    static const char *const names[] = {
        [WIRE_REQUESTS] = "requests",          [WIRE_RESPONSES] = "responses",
        [WIRE_PARAMETERS] = "parameters",      [WIRE_VERDICT] = "start-up verdict",
        [WIRE_TUNING_FILE] = "tuning file",    [WIRE_DIGEST] = "tuning file digest",
        [WIRE_AUTOTUNE] = "autotune settings",
    };
    return kind < ARRAY_LENGTH(names) && names[kind] != NULL ? names[kind] : "unknown";
}

static bool get_field(struct wire_reader *reader, struct wire_request *r,
                      const struct negotiated_field *field)
{
    switch (field->encoding) {
    case FIELD_VIRTUAL:
        break;
    case FIELD_U8:
        *FIELD_AT(uint8_t, r, field) = (uint8_t)wire_get_unsigned(reader, 1);
        break;
    case FIELD_I32:
        *FIELD_AT(int32_t, r, field) = (int32_t)(uint32_t)wire_get_unsigned(reader, 4);
        break;
    case FIELD_U32:
        *FIELD_AT(uint32_t, r, field) = (uint32_t)wire_get_unsigned(reader, 4);
        break;
    case FIELD_F64:
        *FIELD_AT(double, r, field) = wire_get_double(reader);
        break;
    case FIELD_TEXT:
        *FIELD_AT(char *, r, field) = wire_get_text(reader, 2, CHORUS_MAX_NAME_LENGTH);
        break;
    case FIELD_SHAPE:
        r->ndims = (uint8_t)wire_get_unsigned(reader, 1);
        if (!reader->failed && r->ndims > CHORUS_MAX_DIMS)
            return wire_fail(reader, "too many dimensions");
        for (size_t i = 0; i < r->ndims; i++) {
            r->shape[i] = (int64_t)wire_get_unsigned(reader, 8);
            if (!reader->failed && r->shape[i] < 0)
                return wire_fail(reader, "negative dimension");
        }
        break;
    case FIELD_MEMBERS:
        r->member_count = (uint32_t)wire_get_unsigned(reader, 4);
        if (reader->failed)
            return false;
        if (r->member_count > MAX_FIRST_DIMS ||
            (reader->length - reader->offset) / 4 < r->member_count)
            return wire_fail(reader, "member list longer than the message");
        if (r->member_count > 0) {
            r->members = malloc(r->member_count * sizeof *r->members);
            if (r->members == NULL)
                return wire_fail(reader, "out of memory");
            for (size_t i = 0; i < r->member_count; i++)
                r->members[i] = (int32_t)(uint32_t)wire_get_unsigned(reader, 4);
        }
        break;
    }
    if (reader->failed)
        return false;
    const char *wrong = field->check != NULL ? field->check(r) : NULL;
    return wrong == NULL || wire_fail(reader, wrong);
}

static bool get_request(struct wire_reader *reader, struct wire_request *request)
{
    memset(request, 0, sizeof *request);
    uint8_t form = (uint8_t)wire_get_unsigned(reader, 1);
    if (!reader->failed && form > 1)
        return wire_fail(reader, "unknown request form");
    if (form == 1) {
        request->cached = true;
        request->cache_slot = (uint32_t)wire_get_unsigned(reader, 4);
        return !reader->failed;
    }
    for (size_t i = 0; i < negotiated_field_count && !reader->failed; i++)
        get_field(reader, request, &negotiated_fields[i]);
    return !reader->failed;
}

static bool get_response(struct wire_reader *reader, struct wire_response *response)
{
    memset(response, 0, sizeof *response);
    response->type = (uint8_t)wire_get_unsigned(reader, 1);
    if (response->type == RESPONSE_CACHED) {
        response->request.cached = true;
        response->request.cache_slot = (uint32_t)wire_get_unsigned(reader, 4);
        return !reader->failed;
    }
    response->status = (int32_t)(uint32_t)wire_get_unsigned(reader, 4);
    response->contributors = (uint32_t)wire_get_unsigned(reader, 4);
    if (!reader->failed && (response->type < RESPONSE_EXECUTE ||
                            response->type > RESPONSE_CACHED))
        return wire_fail(reader, "unknown response type");
    response->message = wire_get_text(reader, 4, MAX_MESSAGE_LENGTH);
    if (!get_request(reader, &response->request))
        return false;
    response->first_dim_count = (uint32_t)wire_get_unsigned(reader, 4);
    if (reader->failed)
        return false;
    if (response->first_dim_count > MAX_FIRST_DIMS ||
        (reader->length - reader->offset) / 8 < response->first_dim_count)
        return wire_fail(reader, "first-dimension list longer than the message");
    if (response->first_dim_count != 0) {
        response->first_dims = malloc(response->first_dim_count * sizeof(int64_t));
        if (response->first_dims == NULL)
            return wire_fail(reader, "out of memory");
        for (size_t i = 0; i < response->first_dim_count; i++) {
            response->first_dims[i] = (int64_t)wire_get_unsigned(reader, 8);
            if (response->first_dims[i] < 0)
                return wire_fail(reader, "negative first dimension");
        }
    }
    response->rank_mask_count = (uint32_t)wire_get_unsigned(reader, 4);
    if (reader->failed)
        return false;
    if (response->rank_mask_count > MAX_FIRST_DIMS ||
        reader->length - reader->offset < response->rank_mask_count)
        return wire_fail(reader, "rank mask longer than the message");
    if (response->rank_mask_count != 0) {
        response->rank_mask = malloc(response->rank_mask_count);
        if (response->rank_mask == NULL)
            return wire_fail(reader, "out of memory");
        memcpy(response->rank_mask, reader->data + reader->offset, response->rank_mask_count);
        reader->offset += response->rank_mask_count;
    }
    response->last_joined_rank = (int32_t)(uint32_t)wire_get_unsigned(reader, 4);
    return !reader->failed;
}

chorus_status wire_decode(const uint8_t *bytes, size_t length, struct wire_message *message,
                          char *error, size_t error_size)
{
    struct wire_reader reader = {
        .data = bytes, .length = length, .error = error, .error_size = error_size};
    memset(message, 0, sizeof *message);
    uint32_t count = 0;
    if (!wire_get_header(&reader, &message->kind, &message->flags, &count))
        return CHORUS_ERR_PROTOCOL;
    if (message->kind != WIRE_REQUESTS && message->kind != WIRE_RESPONSES) {
        char why[96];
        snprintf(why, sizeof why, "message kind %u (%s), not negotiation's", message->kind,
                 wire_kind_name(message->kind));
        wire_fail(&reader, why);
        return CHORUS_ERR_PROTOCOL;
    }
    /* Every entry takes at least 5 bytes (a cached one): reject counts the message cannot hold
     * before allocating for them. */
    if (count > (length - reader.offset) / 5) {
        wire_fail(&reader, "entry count larger than the message");
        return CHORUS_ERR_PROTOCOL;
    }
    if (message->kind == WIRE_REQUESTS)
        message->requests = calloc(count ? count : 1, sizeof *message->requests);
    else
        message->responses = calloc(count ? count : 1, sizeof *message->responses);
    if (message->requests == NULL && message->responses == NULL) {
        wire_fail(&reader, "out of memory");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < count; i++) {
        message->count = i + 1; /* so that wire_message_free frees what was decoded */
        bool ok = message->kind == WIRE_REQUESTS ? get_request(&reader, &message->requests[i])
                                                 : get_response(&reader, &message->responses[i]);
        if (!ok) {
            wire_message_free(message);
            return CHORUS_ERR_PROTOCOL;
        }
    }
    message->count = count;
    if (reader.offset != length) {
        wire_fail(&reader, "trailing bytes");
        wire_message_free(message);
        return CHORUS_ERR_PROTOCOL;
    }
    return CHORUS_OK;
}

void wire_message_free(struct wire_message *message)
{
    for (uint32_t i = 0; i < message->count; i++) {
        if (message->requests != NULL)
            wire_request_free(&message->requests[i]);
        if (message->responses != NULL)
            wire_response_free(&message->responses[i]);
    }
    free(message->requests);
    free(message->responses);
    memset(message, 0, sizeof *message);
}

#define ORDERED_RECORD_MAGIC 0x4f524452u /* "RDRO" */
#define ORDERED_RECORD_HEAD (4 + 8 + 2)

bool wire_encode_ordered_record(uint64_t position, const struct wire_request *request,
                                uint8_t record[WIRE_ORDERED_RECORD_BYTES])
{
    struct wire_request bare = *request;
    bare.name = bare.group = NULL;
    bare.members = NULL;
    bare.member_count = 0;
    bare.cached = false;
    memset(record, 0, WIRE_ORDERED_RECORD_BYTES);
    struct wire_writer writer = {.data = record + ORDERED_RECORD_HEAD,
                                 .capacity = WIRE_ORDERED_RECORD_BYTES - ORDERED_RECORD_HEAD,
                                 .fixed = true};
    put_request(&writer, &bare);
    if (writer.failed)
        return false;
    size_t request_length = writer.length;
    writer = (struct wire_writer){.data = record, .capacity = ORDERED_RECORD_HEAD, .fixed = true};
    wire_put_unsigned(&writer, ORDERED_RECORD_MAGIC, 4);
    wire_put_unsigned(&writer, position, 8);
    wire_put_unsigned(&writer, request_length, 2);
    return !writer.failed;
}

chorus_status wire_decode_ordered_record(const uint8_t record[WIRE_ORDERED_RECORD_BYTES],
                                         uint64_t *position, struct wire_request *request,
                                         char *error, size_t error_size)
{
    struct wire_reader reader = {
        .data = record, .length = ORDERED_RECORD_HEAD, .error = error, .error_size = error_size};
    memset(request, 0, sizeof *request);
    uint32_t magic = (uint32_t)wire_get_unsigned(&reader, 4);
    *position = wire_get_unsigned(&reader, 8);
    size_t request_length = (size_t)wire_get_unsigned(&reader, 2);
    if (!reader.failed && magic != ORDERED_RECORD_MAGIC)
        wire_fail(&reader, "not an ordered record");
    if (!reader.failed && request_length > WIRE_ORDERED_RECORD_BYTES - ORDERED_RECORD_HEAD)
        wire_fail(&reader, "ordered record longer than its slot");
    if (reader.failed)
        return CHORUS_ERR_PROTOCOL;
    reader.length = ORDERED_RECORD_HEAD + request_length;
    if (!get_request(&reader, request) || reader.offset != reader.length) {
        wire_fail(&reader, "trailing bytes");
        wire_request_free(request);
        return CHORUS_ERR_PROTOCOL;
    }
    return CHORUS_OK;
}
