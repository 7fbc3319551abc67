/*
 * wire.h — the negotiation messages between the ranks' background threads and the
 * coordinator (rank 0): requests (what a rank has ready) and responses (what every rank runs
 * next, in order). The byte layout is drawn in wire.c.
 */
#ifndef CHORUS_WIRE_H
#define CHORUS_WIRE_H

#include "../core/request.h"

#define WIRE_MAGIC 0x53524843u /* "CHRS" in little-endian byte order */
/* 2: process sets; 3: even_split; 4: request fields in negotiated_fields.c's order, responses
 * with a rank mask and the last-joined rank of their own; 5: in_shared_heap; 6:
 * compression_ratio */
#define WIRE_VERSION 6

enum wire_kind {
    WIRE_REQUESTS = 1,  /* a rank -> rank 0 */
    WIRE_RESPONSES = 2, /* rank 0 -> every rank */
};

enum wire_flags {
    WIRE_FLAG_SHUTDOWN = 1u << 0, /* requests: this rank shuts down; responses: all shut down */
    WIRE_FLAG_JOIN = 1u << 1,     /* requests: this rank has joined */
    WIRE_FLAG_BYE = 1u << 2,      /* requests: last message of this rank after a shutdown */
};

struct wire_message {
    uint16_t kind;
    uint32_t flags;
    uint32_t count;
    struct wire_request *requests;   /* WIRE_REQUESTS */
    struct wire_response *responses; /* WIRE_RESPONSES */
};

/* Encodes into a malloc'd buffer; returns its length, 0 when out of memory. */
size_t wire_encode(const struct wire_message *message, uint8_t **bytes);

/* Decodes `length` bytes. Rejects (CHORUS_ERR_PROTOCOL, reason in `error`) a wrong magic or
 * version, truncated or trailing bytes, out-of-range enums, over-long names, negative shapes. */
chorus_status wire_decode(const uint8_t *bytes, size_t length, struct wire_message *message,
                          char *error, size_t error_size);

void wire_message_free(struct wire_message *message);

/* An ordered operation's record: what one member submitted at `position` of its set's order,
 * in a fixed size, so that the members exchange theirs in one allgather (ordered.c). The name,
 * group and members do not travel. Encoding fails (false) only for a request too large for the
 * record, which the fields' bounds rule out. Decoding rejects (CHORUS_ERR_PROTOCOL, reason in
 * `error`) a record that is not one, as wire_decode rejects a message; the request's texts are
 * then empty, and wire_request_free frees them. */
#define WIRE_ORDERED_RECORD_BYTES 256
bool wire_encode_ordered_record(uint64_t position, const struct wire_request *request,
                                uint8_t record[WIRE_ORDERED_RECORD_BYTES]);
chorus_status wire_decode_ordered_record(const uint8_t record[WIRE_ORDERED_RECORD_BYTES],
                                         uint64_t *position, struct wire_request *request,
                                         char *error, size_t error_size);

#endif
