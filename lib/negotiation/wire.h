/*
 * wire.h — the codec: every message between ranks. Negotiation's, between the ranks'
 * background threads and the coordinator (rank 0): requests (what a rank has ready) and
 * responses (what every rank runs next, in order), and the ordered records; their byte layout
 * is drawn in wire.c. The agreement's, by which the ranks agree on settings: at start-up rank
 * 0's parameters and tuning file, each rank's digest of its own copy of that file, and verdicts
 * (a rank's outcome to rank 0, the first failure back to every rank); while training,
 * autotune's next settings; their layouts are drawn in wire_agreement.c. Every message starts
 * with one header and its kind, so that one taken for another is rejected.
 */
#ifndef CHORUS_WIRE_H
#define CHORUS_WIRE_H

#include "../core/request.h"

#define WIRE_MAGIC 0x53524843u /* "CHRS" in little-endian byte order */
/* 2: process sets; 3: even_split; 4: request fields in negotiated_fields.c's order, responses
 * with a rank mask and the last-joined rank of their own; 5: in_shared_heap; 6:
 * compression_ratio; 7: the agreement's kinds (start-up, autotune) */
#define WIRE_VERSION 7

enum wire_kind {
    WIRE_REQUESTS = 1,    /* a rank -> rank 0 */
    WIRE_RESPONSES = 2,   /* rank 0 -> every rank */
    WIRE_PARAMETERS = 3,  /* rank 0 -> every rank at init (struct wire_agreement, all below) */
    WIRE_VERDICT = 4,     /* at init: a rank's outcome -> rank 0, the first failure -> all */
    WIRE_TUNING_FILE = 5, /* rank 0 -> every rank at init */
    WIRE_DIGEST = 6,      /* a rank's copy of the tuning file -> rank 0 at init */
    WIRE_AUTOTUNE = 7,    /* rank 0 -> every rank after each autotune trial */
};

/* "requests", "parameters", ...: a kind in a rejection's text; "unknown" for others. */
const char *wire_kind_name(unsigned kind);

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
 * version, another kind than requests or responses, truncated or trailing bytes, out-of-range
 * enums, over-long names, negative shapes. */
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

/* ----- the agreement's messages ------------------------------------------------------ */

/* The most parameter sources a tuning-file message carries (struct param_set's `sources`),
 * autotune settings an autotune message carries (AUTOTUNE_SETTINGS_MAX), and bytes of a
 * parameters form or a tuning file's text (TUNING_FILE_LIMIT). Their users check theirs fit. */
#define WIRE_SOURCES_MAX 32
#define WIRE_AUTOTUNE_SETTINGS_MAX 8
#define WIRE_AGREEMENT_TEXT_MAX (1u << 20)

/* One message of the kinds WIRE_PARAMETERS .. WIRE_AUTOTUNE: `kind` says which fields travel. */
struct wire_agreement {
    uint16_t kind;
    /* WIRE_VERDICT: the rank whose outcome it is. */
    int32_t rank;
    /* WIRE_VERDICT: CHORUS_OK or that rank's failure; WIRE_TUNING_FILE: rank 0's reading of
     * the file. With its text, NULL or "" when there is none. */
    int32_t status;
    char *message;
    /* WIRE_PARAMETERS: params_encode_wire's form, whose entries end in '\0'; WIRE_TUNING_FILE:
     * the file's text. `length` bytes; decoded ones are followed by a '\0'. */
    char *text;
    size_t length;
    /* WIRE_TUNING_FILE: where rank 0's parameters came from, an enum param_source each. */
    uint8_t sources[WIRE_SOURCES_MAX];
    size_t source_count;
    /* WIRE_DIGEST: text_digest of the rank's copy of the tuning file (0: it has none). */
    uint64_t digest;
    /* WIRE_AUTOTUNE: the trial that ended, whether `settings` stay for the rest of the run, and
     * the settings from the next list on. */
    uint32_t trial;
    bool settled;
    size_t setting_count;
    double settings[WIRE_AUTOTUNE_SETTINGS_MAX];
};

/* Encodes into a malloc'd buffer; returns its length, 0 when out of memory or when a count or
 * length is past its bound above. */
size_t wire_agreement_encode(const struct wire_agreement *message, uint8_t **bytes);

/* Decodes `length` bytes, which must be a message of `kind`. Rejects (CHORUS_ERR_PROTOCOL,
 * reason in `error`, nothing to free) a wrong magic or version, another kind (a foreign
 * message), truncated or trailing bytes, counts and lengths past their bounds, statuses that
 * are neither CHORUS_OK nor an error, sources that are none. CHORUS_OK: free it with
 * wire_agreement_free. */
chorus_status wire_agreement_decode(const uint8_t *bytes, size_t length, uint16_t kind,
                                    struct wire_agreement *message, char *error, size_t error_size);

void wire_agreement_free(struct wire_agreement *message);

#endif
