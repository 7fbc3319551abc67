/*
 * wire.h — the negotiation messages between the ranks' background threads and the
 * coordinator (rank 0): requests (what a rank has ready) and responses (what every rank runs
 * next, in order). The byte layout is drawn in wire.c.
 */
#ifndef CHORUS_WIRE_H
#define CHORUS_WIRE_H

#include "../core/common.h"

#define WIRE_MAGIC 0x53524843u /* "CHRS" in little-endian byte order */
#define WIRE_VERSION 1

enum wire_kind {
    WIRE_REQUESTS = 1,  /* a rank -> rank 0 */
    WIRE_RESPONSES = 2, /* rank 0 -> every rank */
};

enum wire_flags {
    WIRE_FLAG_SHUTDOWN = 1u << 0, /* requests: this rank shuts down; responses: all shut down */
    WIRE_FLAG_JOIN = 1u << 1,     /* requests: this rank has joined */
    WIRE_FLAG_BYE = 1u << 2,      /* requests: last message of this rank after a shutdown */
};

/* What a rank submitted, as negotiated: everything every rank must agree on. */
struct wire_request {
    char *name;
    uint8_t collective;
    uint8_t dtype;
    uint8_t op;
    uint8_t ndims;
    uint8_t compression; /* chorus_compression, resolved: NONE, FP16 or BF16 */
    int32_t root;
    int32_t device;
    int64_t shape[CHORUS_MAX_DIMS];
    double prescale;
    double postscale;
    char *group;         /* first name of the group; "" when not grouped */
    uint32_t group_size; /* tensors in the group; 1 when not grouped */
    bool cached;         /* only cache_slot travels: the response cache holds the rest */
    uint32_t cache_slot;
};

enum response_type {
    RESPONSE_EXECUTE = 1,   /* run the collective */
    RESPONSE_ERROR = 2,     /* complete the handles of `request.name` with `status`, `message` */
    RESPONSE_JOIN_DONE = 3, /* every rank has joined */
    RESPONSE_CACHED = 4,    /* run the collective of response-cache slot request.cache_slot */
};

struct wire_response {
    uint8_t type;
    int32_t status;
    uint32_t contributors;      /* allreduce: ranks with data (the rest joined) */
    char *message;              /* RESPONSE_ERROR */
    struct wire_request request; /* the agreed description */
    uint32_t first_dim_count;   /* allgather: nranks; else 0 */
    int64_t *first_dims;        /* allgather: every rank's first dimension */
    double agreed_at;           /* rank 0 only, not sent: when it was decided (timeline) */
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

void wire_request_free(struct wire_request *request);
/* Deep copy; false when out of memory. */
bool wire_request_copy(struct wire_request *to, const struct wire_request *from);
/* Same name and every negotiated field. */
bool wire_request_equal(const struct wire_request *a, const struct wire_request *b);
void wire_response_free(struct wire_response *response);
void wire_message_free(struct wire_message *message);

#endif
