/*
 * negotiated_fields.h — the one table of what a request carries and what ranks must agree on.
 *
 * Every field of struct wire_request that travels to rank 0 is one row: its name (as mismatch
 * messages say it), how it is encoded on the wire, which collectives' ranks must agree on it,
 * how two values compare and print, and whether it is part of the response-cache key. The
 * negotiator's agreement check, the mismatch messages, wire_request_equal and the wire codec
 * all walk this table, so a new field or collective is one row, and the four can no longer
 * disagree (they once did: only allreduce compared groups in the message, every collective in
 * the check, and a grouped allgather against a single one ran without an error).
 */
#ifndef CHORUS_NEGOTIATED_FIELDS_H
#define CHORUS_NEGOTIATED_FIELDS_H

#include "../core/request.h"

/* How a field travels (wire.c draws the resulting layout). */
enum field_encoding {
    FIELD_VIRTUAL,  /* not on the wire: a second view of another field (an allgather's rows) */
    FIELD_U8,       /* uint8_t */
    FIELD_I32,      /* int32_t, as its u32 bit pattern */
    FIELD_U32,      /* uint32_t */
    FIELD_F64,      /* double, as its IEEE 754 bit pattern */
    FIELD_TEXT,     /* char *: u16 length, then the bytes (no terminating zero) */
    FIELD_SHAPE,    /* ndims (u8) then shape[ndims] (i64 each) */
    FIELD_MEMBERS,  /* member_count (u32) then members[member_count] (i32 each) */
};

/* A bit per collective, COLLECTIVE_PROCESS_SET included. */
#define FIELD_COLLECTIVE(c) (1u << (unsigned)(c))
#define FIELD_ALL_TENSORS                                                                        \
    (FIELD_COLLECTIVE(CHORUS_ALLREDUCE) | FIELD_COLLECTIVE(CHORUS_BROADCAST) |                   \
     FIELD_COLLECTIVE(CHORUS_ALLGATHER) | FIELD_COLLECTIVE(CHORUS_REDUCESCATTER) |               \
     FIELD_COLLECTIVE(CHORUS_ALLTOALL))
/* A lane's barrier compares only what every request does: that it is one (lib/lane). */
#define FIELD_EVERY_REQUEST                                                                      \
    (FIELD_ALL_TENSORS | FIELD_COLLECTIVE(COLLECTIVE_PROCESS_SET) |                             \
     FIELD_COLLECTIVE(COLLECTIVE_BARRIER))

struct negotiated_field {
    const char *name;              /* "dtype": the message reads "dtype mismatch: ..." */
    enum field_encoding encoding;
    size_t offset;                 /* of the value in struct wire_request */
    uint32_t agree;                /* FIELD_COLLECTIVE bits: whose ranks must agree on it */
    bool cache_key;                /* compared exactly by wire_request_equal */
    /* Whether two ranks' values agree; NULL: they are the same value. */
    bool (*agrees)(const struct wire_request *a, const struct wire_request *b);
    /* With `agrees`: mixes into *hash what `agrees` compares, so that values that agree mix
     * alike (negotiated_fields_digest). */
    void (*digest)(const struct wire_request *request, uint64_t *hash);
    /* The value as the mismatch message prints it. */
    void (*format)(const struct wire_request *request, char *text, size_t size);
    /* After decoding: what is wrong with the value, or NULL. */
    const char *(*check)(const struct wire_request *request);
    /* A flag of each rank's own (a fact of its tensor, not something to agree on) that a
     * response of the `combined` collectives has only where every member's request has it:
     * whether `member`'s does, of the tensor `reference` describes. NULL: not such a field. */
    bool (*member_has)(const struct wire_request *member, const struct wire_request *reference);
    uint32_t combined; /* FIELD_COLLECTIVE bits: whose responses combine it */
};

extern const struct negotiated_field negotiated_fields[];
extern const size_t negotiated_field_count;

/* Whether the row applies to requests of `collective`. */
bool negotiated_field_applies(const struct negotiated_field *field, unsigned collective);

/* Whether `a` and `b`, submitted by two ranks for one tensor, agree on every field their
 * collective compares (a's collective decides; a differing collective disagrees). */
bool negotiated_fields_agree(const struct wire_request *a, const struct wire_request *b);

/* A 64-bit digest of what `request`'s collective compares: requests that agree
 * (negotiated_fields_agree) have the same digest, and requests that do not almost never do. The
 * ordered operations' fast path compares digests first (lib/lane). */
uint64_t negotiated_fields_digest(const struct wire_request *request);

/* Mixes `word` into `hash` (the digest's step). */
static inline void negotiated_digest_mix(uint64_t *hash, uint64_t word)
{
    uint64_t h = (*hash ^ word) * 0x9e3779b97f4a7c15ull;
    *hash = h ^ (h >> 29);
}

/* For each flag of the members' own that `reference`'s collective combines (member_has):
 * clears it in `response` unless `member` (NULL: a member that submitted nothing, joined) has
 * it too. Called for every member, it leaves set only what all of them have; the negotiator and
 * the ordered operations' check both combine so. */
void negotiated_fields_combine(struct wire_request *response,
                               const struct wire_request *reference,
                               const struct wire_request *member);

/* Whether `a` and `b` are the same description: every field of the response-cache key,
 * compared exactly (the name included). */
bool wire_request_equal(const struct wire_request *a, const struct wire_request *b);

/* Exact equality of one field's values (the cache key's comparison). */
bool negotiated_field_equal(const struct negotiated_field *field, const struct wire_request *a,
                            const struct wire_request *b);

#endif
