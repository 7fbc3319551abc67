/*
 * test_wire.c — the codec: round trips of negotiation's requests and responses and of every
 * kind of the agreement's messages, and rejection of every truncation, corrupted headers,
 * out-of-range fields, trailing bytes, and messages of another kind or build.
 */
#include "../../lib/core/params.h"
#include "../../lib/negotiation/wire.h"
#include "../common/reference.h"

#include "../common/check_runner.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct wire_request sample_request(const char *name)
{
    struct wire_request request = {.name = (char *)name,
                                   .collective = CHORUS_ALLGATHER,
                                   .dtype = CHORUS_BFLOAT16,
                                   .op = CHORUS_MAX,
                                   .ndims = 3,
                                   .root = 2,
                                   .device = -1,
                                   .shape = {5, 0, 7},
                                   .prescale = 0.5,
                                   .postscale = -3.25,
                                   .group = "group.leader",
                                   .group_size = 4};
    return request;
}

START_TEST(requests_round_trip)
{
    struct wire_request requests[2] = {sample_request("layer1.weight"), sample_request("b")};
    requests[1].ndims = 0;
    requests[1].group = "";
    requests[1].group_size = 1;
    requests[1].collective = CHORUS_ALLTOALL;
    requests[1].even_split = 1;
    struct wire_message message = {.kind = WIRE_REQUESTS,
                                   .flags = WIRE_FLAG_JOIN,
                                   .count = 2,
                                   .requests = requests};
    uint8_t *bytes = NULL;
    size_t length = wire_encode(&message, &bytes);
    ck_assert_uint_gt(length, 16);
    struct wire_message decoded;
    char error[256];
    ck_assert_int_eq(wire_decode(bytes, length, &decoded, error, sizeof error), CHORUS_OK);
    ck_assert_uint_eq(decoded.count, 2);
    ck_assert_uint_eq(decoded.flags, WIRE_FLAG_JOIN);
    ck_assert_str_eq(decoded.requests[0].name, "layer1.weight");
    ck_assert_uint_eq(decoded.requests[0].collective, CHORUS_ALLGATHER);
    ck_assert_uint_eq(decoded.requests[0].dtype, CHORUS_BFLOAT16);
    ck_assert_uint_eq(decoded.requests[0].ndims, 3);
    ck_assert_int_eq(decoded.requests[0].shape[2], 7);
    ck_assert_int_eq(decoded.requests[0].device, -1);
    ck_assert(decoded.requests[0].postscale == -3.25);
    ck_assert_str_eq(decoded.requests[0].group, "group.leader");
    ck_assert_uint_eq(decoded.requests[0].group_size, 4);
    ck_assert_str_eq(decoded.requests[1].name, "b");
    ck_assert_uint_eq(decoded.requests[1].ndims, 0);
    ck_assert_uint_eq(decoded.requests[0].even_split, 0);
    ck_assert_uint_eq(decoded.requests[1].even_split, 1);
    wire_message_free(&decoded);
    free(bytes);
}
END_TEST

/* TOPK's ratio travels with its request; a decoded ratio outside (0, 1], or one without TOPK,
 * is refused like any malformed field. */
START_TEST(compression_ratio_round_trips_and_is_checked)
{
    struct wire_request request = sample_request("topk");
    request.collective = CHORUS_ALLREDUCE;
    request.compression = CHORUS_COMPRESSION_TOPK;
    request.compression_ratio = 0.0125;
    struct wire_message message = {.kind = WIRE_REQUESTS, .count = 1, .requests = &request};
    uint8_t *bytes = NULL;
    size_t length = wire_encode(&message, &bytes);
    struct wire_message decoded;
    char error[256];
    ck_assert_int_eq(wire_decode(bytes, length, &decoded, error, sizeof error), CHORUS_OK);
    ck_assert(decoded.requests[0].compression_ratio == 0.0125);
    ck_assert_uint_eq(decoded.requests[0].compression, CHORUS_COMPRESSION_TOPK);
    wire_message_free(&decoded);
    free(bytes);
    const struct {
        uint8_t compression;
        double ratio;
    } bad[] = {{CHORUS_COMPRESSION_TOPK, 0.0},
               {CHORUS_COMPRESSION_TOPK, 1.5},
               {CHORUS_COMPRESSION_NONE, 0.5}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        request.compression = bad[i].compression;
        request.compression_ratio = bad[i].ratio;
        length = wire_encode(&message, &bytes);
        ck_assert_int_eq(wire_decode(bytes, length, &decoded, error, sizeof error),
                         CHORUS_ERR_PROTOCOL);
        ck_assert_msg(strstr(error, "compression ratio") != NULL, "%s", error);
        free(bytes);
    }
}
END_TEST

START_TEST(responses_round_trip)
{
    int64_t dims[3] = {4, 0, 9};
    struct wire_response response = {.type = RESPONSE_ERROR,
                                     .status = CHORUS_ERR_MISMATCH,
                                     .contributors = 3,
                                     .message = "allreduce \"x\": dtype mismatch",
                                     .request = sample_request("x"),
                                     .first_dim_count = 3,
                                     .first_dims = dims};
    struct wire_message message = {.kind = WIRE_RESPONSES, .count = 1, .responses = &response};
    uint8_t *bytes = NULL;
    size_t length = wire_encode(&message, &bytes);
    struct wire_message decoded;
    char error[256];
    ck_assert_int_eq(wire_decode(bytes, length, &decoded, error, sizeof error), CHORUS_OK);
    ck_assert_int_eq(decoded.responses[0].status, CHORUS_ERR_MISMATCH);
    ck_assert_str_eq(decoded.responses[0].message, "allreduce \"x\": dtype mismatch");
    ck_assert_uint_eq(decoded.responses[0].first_dim_count, 3);
    ck_assert_int_eq(decoded.responses[0].first_dims[2], 9);
    ck_assert_uint_eq(decoded.responses[0].contributors, 3);
    wire_message_free(&decoded);
    free(bytes);
}
END_TEST

START_TEST(cached_entries_travel_as_slots)
{
    struct wire_request requests[2] = {sample_request("full"), sample_request("cached")};
    requests[1].cached = true;
    requests[1].cache_slot = 77;
    struct wire_message message = {.kind = WIRE_REQUESTS, .count = 2, .requests = requests};
    uint8_t *bytes = NULL;
    size_t length = wire_encode(&message, &bytes);
    struct wire_message decoded;
    char error[256];
    ck_assert_int_eq(wire_decode(bytes, length, &decoded, error, sizeof error), CHORUS_OK);
    ck_assert(!decoded.requests[0].cached);
    ck_assert(decoded.requests[1].cached);
    ck_assert_uint_eq(decoded.requests[1].cache_slot, 77);
    ck_assert_ptr_null(decoded.requests[1].name);
    wire_message_free(&decoded);
    free(bytes);

    struct wire_response response = {.type = RESPONSE_CACHED};
    response.request.cache_slot = 5;
    struct wire_message responses = {.kind = WIRE_RESPONSES, .count = 1, .responses = &response};
    length = wire_encode(&responses, &bytes);
    ck_assert_uint_eq(length, 16 + 1 + 4); /* header, type, slot */
    ck_assert_int_eq(wire_decode(bytes, length, &decoded, error, sizeof error), CHORUS_OK);
    ck_assert_int_eq(decoded.responses[0].type, RESPONSE_CACHED);
    ck_assert_uint_eq(decoded.responses[0].request.cache_slot, 5);
    wire_message_free(&decoded);
    free(bytes);
}
END_TEST

START_TEST(every_truncation_and_extension_is_rejected)
{
    struct wire_request request = sample_request("truncate.me");
    struct wire_message message = {.kind = WIRE_REQUESTS, .count = 1, .requests = &request};
    uint8_t *bytes = NULL;
    size_t length = wire_encode(&message, &bytes);
    char error[256];
    for (size_t cut = 0; cut < length; cut++) {
        struct wire_message decoded;
        ck_assert_msg(wire_decode(bytes, cut, &decoded, error, sizeof error) ==
                          CHORUS_ERR_PROTOCOL,
                      "a message cut to %zu of %zu bytes was accepted", cut, length);
    }
    uint8_t *longer = malloc(length + 1);
    memcpy(longer, bytes, length);
    longer[length] = 0;
    struct wire_message decoded;
    ck_assert_int_eq(wire_decode(longer, length + 1, &decoded, error, sizeof error),
                     CHORUS_ERR_PROTOCOL);
    ck_assert_ptr_nonnull(strstr(error, "trailing"));
    free(longer);
    free(bytes);
}
END_TEST

START_TEST(bad_fields_are_rejected_with_a_reason)
{
    struct wire_request request = sample_request("t");
    struct wire_message message = {.kind = WIRE_REQUESTS, .count = 1, .requests = &request};
    uint8_t *bytes = NULL;
    size_t length = wire_encode(&message, &bytes);
    char error[256];
    struct wire_message decoded;
    struct {
        size_t offset;
        uint8_t value;
        const char *reason;
    } corruptions[] = {
        {0, 0x00, "magic"},
        {4, 0x09, "version"},
        {6, 0x63, "kind"},
        {12, 0xff, "count"},
        {16, 7, "form"},
        /* The fields follow negotiated_fields.c's order: after the form (byte 16), the name
         * (length and one byte), the collective, the process set (4), the member count (4). */
        {17 + 2 + 1, 9, "collective"},
        {17 + 2 + 1 + 1 + 3, 0x80, "negative process set"},
        {17 + 2 + 1 + 1 + 4 + 4, 42, "dtype"},
        {17 + 2 + 1 + 1 + 4 + 4 + 1 + 4, 9, "dimensions"}, /* after the device */
        {17 + 2 + 1 + 1 + 4 + 4 + 1 + 4 + 1 + 7, 0x80, "negative"}, /* top byte of shape[0] */
        {17 + 2 + 1 + 1 + 4 + 4 + 1 + 4 + 1 + 3 * 8, 17, "operator"},
    };
    for (size_t i = 0; i < sizeof corruptions / sizeof corruptions[0]; i++) {
        uint8_t *copy = malloc(length);
        memcpy(copy, bytes, length);
        copy[corruptions[i].offset] = corruptions[i].value;
        ck_assert_int_eq(wire_decode(copy, length, &decoded, error, sizeof error),
                         CHORUS_ERR_PROTOCOL);
        ck_assert_msg(strstr(error, corruptions[i].reason) != NULL, "expected '%s' in: %s",
                      corruptions[i].reason, error);
        free(copy);
    }
    free(bytes);
}
END_TEST

/* Random bytes of trial `trial`, at most `size`; every other message starts with this build's
 * magic, version and `kind`, so that more than the header gets parsed. Returns the length. */
static size_t random_message(uint64_t trial, uint8_t *buffer, size_t size, uint16_t kind)
{
    size_t length = test_random(trial, 1, 0) % size;
    for (size_t i = 0; i < length; i++)
        buffer[i] = (uint8_t)test_random(trial, 2, i);
    if (length >= 8 && trial % 2 == 0) {
        memcpy(buffer, "CHRS", 4);
        buffer[4] = WIRE_VERSION;
        buffer[5] = 0;
        buffer[6] = (uint8_t)kind;
        buffer[7] = 0;
    }
    return length;
}

START_TEST(random_bytes_never_crash_the_decoder)
{
    uint8_t buffer[512];
    char error[256];
    for (uint64_t trial = 0; trial < 20000; trial++) {
        size_t length =
            random_message(trial, buffer, sizeof buffer, (uint16_t)(WIRE_REQUESTS + trial % 2));
        struct wire_message decoded;
        if (wire_decode(buffer, length, &decoded, error, sizeof error) == CHORUS_OK)
            wire_message_free(&decoded);
    }
}
END_TEST

/* An ordered record carries the position and every negotiated field but the name, group and
 * members, in its fixed size; what is not a record, or overruns its slot, is rejected. */
START_TEST(ordered_records_round_trip_in_a_fixed_size)
{
    struct wire_request request = sample_request("not on the wire");
    request.shape[CHORUS_MAX_DIMS - 1] = 9;
    request.ndims = CHORUS_MAX_DIMS; /* the largest request there is */
    uint8_t record[WIRE_ORDERED_RECORD_BYTES];
    ck_assert(wire_encode_ordered_record(41, &request, record));
    uint64_t position = 0;
    struct wire_request decoded;
    char error[256];
    ck_assert_int_eq(wire_decode_ordered_record(record, &position, &decoded, error, sizeof error),
                     CHORUS_OK);
    ck_assert_uint_eq(position, 41);
    ck_assert_str_eq(decoded.name, "");
    ck_assert_str_eq(decoded.group, "");
    ck_assert_uint_eq(decoded.collective, CHORUS_ALLGATHER);
    ck_assert_uint_eq(decoded.dtype, CHORUS_BFLOAT16);
    ck_assert_uint_eq(decoded.ndims, CHORUS_MAX_DIMS);
    ck_assert_int_eq(decoded.shape[CHORUS_MAX_DIMS - 1], 9);
    ck_assert_int_eq(decoded.root, 2);
    ck_assert(decoded.prescale == 0.5 && decoded.postscale == -3.25);
    ck_assert_uint_eq(decoded.group_size, 4);
    wire_request_free(&decoded);
    uint8_t bad[WIRE_ORDERED_RECORD_BYTES];
    memcpy(bad, record, sizeof bad);
    bad[0] ^= 1; /* the magic number */
    ck_assert_int_eq(wire_decode_ordered_record(bad, &position, &decoded, error, sizeof error),
                     CHORUS_ERR_PROTOCOL);
    wire_request_free(&decoded);
    memcpy(bad, record, sizeof bad);
    bad[12] = 0xff; /* a request longer than the slot */
    bad[13] = 0xff;
    ck_assert_int_eq(wire_decode_ordered_record(bad, &position, &decoded, error, sizeof error),
                     CHORUS_ERR_PROTOCOL);
    ck_assert_msg(strstr(error, "longer than its slot") != NULL, "%s", error);
    wire_request_free(&decoded);
    memcpy(bad, record, sizeof bad);
    bad[12] = (uint8_t)(bad[12] + 1); /* one byte more than the request */
    ck_assert_int_eq(wire_decode_ordered_record(bad, &position, &decoded, error, sizeof error),
                     CHORUS_ERR_PROTOCOL);
    wire_request_free(&decoded);
}
END_TEST

/* One message of each of the agreement's kinds, every field that travels set. */
static const char parameters_form[] = "CHORUS_FUSION_THRESHOLD=134217728\0CHORUS_CYCLE_TIME_MS=5\0";

static struct wire_agreement sample_agreement(uint16_t kind)
{
    struct wire_agreement message = {.kind = kind};
    switch (kind) {
    case WIRE_PARAMETERS:
        message.text = (char *)parameters_form;
        message.length = sizeof parameters_form - 1; /* entries end in '\0', kept */
        break;
    case WIRE_VERDICT:
        message.rank = 3;
        message.status = CHORUS_ERR_BAD_PARAMETER;
        message.message = "CHORUS_FUSION_THRESHOLD=\"lots\" is not a size";
        break;
    case WIRE_TUNING_FILE:
        message.status = CHORUS_OK;
        message.message = "";
        message.text = "chorus-tuning 1\nalltoall pairwise\n";
        message.length = strlen(message.text);
        message.source_count = WIRE_SOURCES_MAX;
        for (size_t i = 0; i < message.source_count; i++)
            message.sources[i] = (uint8_t)(i % (PARAM_SOURCE_TUNING_FILE + 1));
        break;
    case WIRE_DIGEST:
        message.digest = 0x0123456789abcdefull;
        break;
    case WIRE_AUTOTUNE:
        message.trial = 7;
        message.settled = true;
        message.setting_count = 3;
        message.settings[0] = 65536;
        message.settings[1] = 134217728;
        message.settings[2] = 2.5;
        break;
    }
    return message;
}

static const uint16_t agreement_kinds[] = {WIRE_PARAMETERS, WIRE_VERDICT, WIRE_TUNING_FILE,
                                           WIRE_DIGEST, WIRE_AUTOTUNE};

START_TEST(agreement_messages_round_trip)
{
    for (size_t k = 0; k < sizeof agreement_kinds / sizeof agreement_kinds[0]; k++) {
        struct wire_agreement sent = sample_agreement(agreement_kinds[k]);
        uint8_t *bytes = NULL;
        size_t length = wire_agreement_encode(&sent, &bytes);
        ck_assert_uint_gt(length, 16);
        struct wire_agreement got;
        char error[256] = "";
        ck_assert_msg(wire_agreement_decode(bytes, length, sent.kind, &got, error, sizeof error) ==
                          CHORUS_OK,
                      "%s: %s", wire_kind_name(sent.kind), error);
        ck_assert_uint_eq(got.kind, sent.kind);
        ck_assert_int_eq(got.rank, sent.rank);
        ck_assert_int_eq(got.status, sent.status);
        ck_assert_str_eq(got.message != NULL ? got.message : "",
                         sent.message != NULL ? sent.message : "");
        ck_assert_uint_eq(got.length, sent.length);
        ck_assert(sent.length == 0 || memcmp(got.text, sent.text, sent.length) == 0);
        ck_assert(got.text == NULL || got.text[got.length] == '\0');
        ck_assert_uint_eq(got.source_count, sent.source_count);
        ck_assert(memcmp(got.sources, sent.sources, sizeof sent.sources) == 0);
        ck_assert(got.digest == sent.digest);
        ck_assert_uint_eq(got.trial, sent.trial);
        ck_assert(got.settled == sent.settled);
        ck_assert_uint_eq(got.setting_count, sent.setting_count);
        ck_assert(memcmp(got.settings, sent.settings, sizeof sent.settings) == 0);
        wire_agreement_free(&got);
        free(bytes);
    }
}
END_TEST

START_TEST(agreement_truncations_and_extensions_are_rejected)
{
    for (size_t k = 0; k < sizeof agreement_kinds / sizeof agreement_kinds[0]; k++) {
        struct wire_agreement sent = sample_agreement(agreement_kinds[k]);
        uint8_t *bytes = NULL;
        size_t length = wire_agreement_encode(&sent, &bytes);
        char error[256];
        struct wire_agreement got;
        for (size_t cut = 0; cut < length; cut++) {
            error[0] = '\0';
            ck_assert_msg(wire_agreement_decode(bytes, cut, sent.kind, &got, error, sizeof error) ==
                              CHORUS_ERR_PROTOCOL,
                          "a %s message cut to %zu of %zu bytes was accepted",
                          wire_kind_name(sent.kind), cut, length);
            ck_assert_msg(strstr(error, "malformed") != NULL, "no reason: '%s'", error);
        }
        uint8_t *longer = malloc(length + 1);
        memcpy(longer, bytes, length);
        longer[length] = 0;
        ck_assert_int_eq(
            wire_agreement_decode(longer, length + 1, sent.kind, &got, error, sizeof error),
            CHORUS_ERR_PROTOCOL);
        ck_assert_msg(strstr(error, "trailing") != NULL, "%s", error);
        free(longer);
        free(bytes);
    }
}
END_TEST

/* A message taken for another: each kind where each other kind is expected, negotiation's
 * where the agreement's are and the other way round, and another build's version. */
START_TEST(foreign_messages_are_rejected_naming_what_they_are)
{
    char error[256];
    struct wire_agreement got;
    for (size_t k = 0; k < sizeof agreement_kinds / sizeof agreement_kinds[0]; k++) {
        struct wire_agreement sent = sample_agreement(agreement_kinds[k]);
        uint8_t *bytes = NULL;
        size_t length = wire_agreement_encode(&sent, &bytes);
        for (size_t e = 0; e < sizeof agreement_kinds / sizeof agreement_kinds[0]; e++) {
            if (e == k)
                continue;
            ck_assert_int_eq(
                wire_agreement_decode(bytes, length, agreement_kinds[e], &got, error, sizeof error),
                CHORUS_ERR_PROTOCOL);
            char expected[128];
            snprintf(expected, sizeof expected,
                     "malformed %s message at byte 16 of %zu: a %s message",
                     wire_kind_name(agreement_kinds[e]), length, wire_kind_name(sent.kind));
            ck_assert_msg(strstr(error, expected) != NULL, "expected '%s' in: %s", expected, error);
        }
        struct wire_message negotiation;
        ck_assert_int_eq(wire_decode(bytes, length, &negotiation, error, sizeof error),
                         CHORUS_ERR_PROTOCOL);
        ck_assert_msg(strstr(error, "not negotiation's") != NULL, "%s", error);
        bytes[4] = WIRE_VERSION - 1; /* the version, a build before this one */
        ck_assert_int_eq(wire_agreement_decode(bytes, length, sent.kind, &got, error, sizeof error),
                         CHORUS_ERR_PROTOCOL);
        ck_assert_msg(strstr(error, "different builds") != NULL, "%s", error);
        free(bytes);
    }
    struct wire_request request = sample_request("x");
    struct wire_message message = {.kind = WIRE_REQUESTS, .count = 1, .requests = &request};
    uint8_t *bytes = NULL;
    size_t length = wire_encode(&message, &bytes);
    ck_assert_int_eq(
        wire_agreement_decode(bytes, length, WIRE_PARAMETERS, &got, error, sizeof error),
        CHORUS_ERR_PROTOCOL);
    ck_assert_msg(strstr(error, "a requests message") != NULL, "%s", error);
    free(bytes);
}
END_TEST

START_TEST(agreement_fields_out_of_range_are_rejected)
{
    static const struct {
        uint16_t kind;
        size_t offset; /* after the 16 bytes of the header */
        uint8_t value;
        const char *reason;
    } corruptions[] = {
        {WIRE_VERDICT, 3, 0x80, "negative rank"},           /* top byte of the rank */
        {WIRE_VERDICT, 7, 0x00, "neither success nor"},     /* a positive status */
        {WIRE_TUNING_FILE, 0, 0x05, "neither success nor"}, /* status 5 */
        {WIRE_AUTOTUNE, 4, 2, "settled"},
        {WIRE_AUTOTUNE, 5, WIRE_AUTOTUNE_SETTINGS_MAX + 1, "more settings"},
        {WIRE_PARAMETERS, 3, 0x10, "too long"}, /* a form of 256 MiB */
        {WIRE_DIGEST, 0, 0, NULL},              /* any digest is one */
    };
    char error[256];
    for (size_t i = 0; i < sizeof corruptions / sizeof corruptions[0]; i++) {
        struct wire_agreement sent = sample_agreement(corruptions[i].kind);
        uint8_t *bytes = NULL;
        size_t length = wire_agreement_encode(&sent, &bytes);
        bytes[16 + corruptions[i].offset] = corruptions[i].value;
        struct wire_agreement got;
        chorus_status status =
            wire_agreement_decode(bytes, length, sent.kind, &got, error, sizeof error);
        if (corruptions[i].reason == NULL) {
            ck_assert_int_eq(status, CHORUS_OK);
            wire_agreement_free(&got);
        } else {
            ck_assert_int_eq(status, CHORUS_ERR_PROTOCOL);
            ck_assert_msg(strstr(error, corruptions[i].reason) != NULL, "expected '%s' in: %s",
                          corruptions[i].reason, error);
        }
        free(bytes);
    }
    /* A tuning file's last source, past the sources there are. */
    struct wire_agreement sent = sample_agreement(WIRE_TUNING_FILE);
    uint8_t *bytes = NULL;
    size_t length = wire_agreement_encode(&sent, &bytes);
    bytes[length - 1] = PARAM_SOURCE_TUNING_FILE + 1;
    struct wire_agreement got;
    ck_assert_int_eq(wire_agreement_decode(bytes, length, sent.kind, &got, error, sizeof error),
                     CHORUS_ERR_PROTOCOL);
    ck_assert_msg(strstr(error, "unknown parameter source") != NULL, "%s", error);
    free(bytes);
    /* Encoding refuses what decoding would. */
    sent = sample_agreement(WIRE_AUTOTUNE);
    sent.setting_count = WIRE_AUTOTUNE_SETTINGS_MAX + 1;
    ck_assert_uint_eq(wire_agreement_encode(&sent, &bytes), 0);
    ck_assert_ptr_null(bytes);
}
END_TEST

START_TEST(random_bytes_never_crash_the_agreement_decoder)
{
    uint8_t buffer[256];
    char error[256];
    for (uint64_t trial = 0; trial < 20000; trial++) {
        uint16_t kind = agreement_kinds[trial % 5];
        size_t length = random_message(trial, buffer, sizeof buffer, kind);
        if (length >= 16 && trial % 2 == 0) /* and the flags (0) and count (1) of one body */
            memcpy(buffer + 8, "\0\0\0\0\1\0\0\0", 8);
        struct wire_agreement got;
        if (wire_agreement_decode(buffer, length, kind, &got, error, sizeof error) == CHORUS_OK)
            wire_agreement_free(&got);
    }
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("wire");
    TCase *tc = tcase_create("wire");
    tcase_add_test(tc, requests_round_trip);
    tcase_add_test(tc, compression_ratio_round_trips_and_is_checked);
    tcase_add_test(tc, responses_round_trip);
    tcase_add_test(tc, cached_entries_travel_as_slots);
    tcase_add_test(tc, every_truncation_and_extension_is_rejected);
    tcase_add_test(tc, bad_fields_are_rejected_with_a_reason);
    tcase_add_test(tc, random_bytes_never_crash_the_decoder);
    tcase_add_test(tc, ordered_records_round_trip_in_a_fixed_size);
    tcase_add_test(tc, agreement_messages_round_trip);
    tcase_add_test(tc, agreement_truncations_and_extensions_are_rejected);
    tcase_add_test(tc, foreign_messages_are_rejected_naming_what_they_are);
    tcase_add_test(tc, agreement_fields_out_of_range_are_rejected);
    tcase_add_test(tc, random_bytes_never_crash_the_agreement_decoder);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
