/*
 * fuzz_negotiation.c — libFuzzer target for the coordinator's state machine: the input is a
 * program of submissions from 1-8 fake ranks (names from a small set, so that they collide;
 * dtypes, shapes, roots and groups that sometimes disagree), joins, stall checks with failing
 * and taking the responses. Nothing may crash, leak or read freed memory (AddressSanitizer),
 * and every response must be well formed. Built and run by tools/fuzz.
 */
#include "../../lib/negotiation/negotiation.h"

#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"a", "b", "c", "g", "h", "fc1.weight"};
#define NAME_COUNT (sizeof names / sizeof names[0])

struct reader {
    const uint8_t *data;
    size_t size, at;
};

static uint8_t next(struct reader *reader)
{
    return reader->at < reader->size ? reader->data[reader->at++] : 0;
}

static void check_responses(struct negotiator *negotiator)
{
    struct wire_response *responses = NULL;
    size_t count = negotiator_take_responses(negotiator, &responses);
    for (size_t i = 0; i < count; i++) {
        const struct wire_response *response = &responses[i];
        if (response->type != RESPONSE_JOIN_DONE &&
            (response->request.name == NULL || response->request.group == NULL))
            abort();
        if (response->type == RESPONSE_ERROR && response->message == NULL)
            abort();
        wire_response_free(&responses[i]);
    }
    free(responses);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct reader reader = {data, size, 0};
    int nranks = 1 + next(&reader) % 8;
    struct negotiator negotiator;
    if (!negotiator_init(&negotiator, nranks))
        return 0;
    double now = 0;
    while (reader.at < reader.size && !negotiator.failed) {
        uint8_t op = next(&reader), argument = next(&reader), variant = next(&reader);
        int rank = argument % nranks;
        now += (variant & 15) * 0.5;
        switch (op % 8) {
        case 0: case 1: case 2: case 3: {
            const char *name = names[(argument >> 3) % NAME_COUNT];
            bool grouped = (variant & 0x10) != 0;
            struct wire_request request = {
                .name = (char *)name,
                .collective = (uint8_t)((variant >> 5) % CHORUS_COLLECTIVE_COUNT),
                .dtype = (uint8_t)((op >> 3) % CHORUS_DTYPE_COUNT),
                .op = (uint8_t)((op >> 5) % CHORUS_OP_COUNT),
                .ndims = 1,
                .shape = {(int64_t)(variant >> 6)},
                .root = (int32_t)((op >> 6) % (nranks + 1)),
                .device = -1,
                .prescale = 1,
                .postscale = 1,
                .group = grouped ? (char *)names[3 + (op >> 7)] : "",
                .group_size = grouped ? 2 : 1,
            };
            negotiator_submit(&negotiator, rank, &request, now);
            break;
        }
        case 4:
            negotiator_join(&negotiator, rank);
            break;
        case 5:
            negotiator_check_stalls(&negotiator, now, 1, (variant & 1) ? 2 : 0, NULL, NULL);
            break;
        default:
            check_responses(&negotiator);
        }
    }
    check_responses(&negotiator);
    negotiator_destroy(&negotiator);
    return 0;
}
