/*
 * fuzz_wire.c — libFuzzer target for the codec's decoders: any bytes either decode or are
 * rejected with a reason, never crash or leak; what decodes encodes to bytes that decode to the
 * same message. The same bytes go to negotiation's decoder and to the agreement's, which
 * expects the kind the header names (so that its bodies get parsed). Built and run by
 * tools/fuzz.
 */
#include "../../lib/negotiation/wire.h"
#include "../../lib/negotiation/negotiated_fields.h"

#include <stdlib.h>
#include <string.h>

static void check_negotiation(const uint8_t *data, size_t size)
{
    struct wire_message message;
    char error[256];
    if (wire_decode(data, size, &message, error, sizeof error) != CHORUS_OK) {
        if (error[0] == '\0')
            abort(); /* a rejection must say why */
        return;
    }
    uint8_t *bytes = NULL;
    size_t length = wire_encode(&message, &bytes);
    struct wire_message again;
    if (length == 0 || wire_decode(bytes, length, &again, error, sizeof error) != CHORUS_OK ||
        again.kind != message.kind || again.count != message.count ||
        again.flags != message.flags)
        abort();
    for (uint32_t i = 0; message.kind == WIRE_REQUESTS && i < message.count; i++)
        if (!wire_request_equal(&message.requests[i], &again.requests[i]))
            abort();
    wire_message_free(&again);
    wire_message_free(&message);
    free(bytes);
}

static void check_agreement(const uint8_t *data, size_t size)
{
    uint16_t kind = size >= 8 ? (uint16_t)(data[6] | data[7] << 8) : WIRE_PARAMETERS;
    struct wire_agreement message;
    char error[256] = "";
    if (wire_agreement_decode(data, size, kind, &message, error, sizeof error) != CHORUS_OK) {
        if (error[0] == '\0')
            abort();
        return;
    }
    uint8_t *bytes = NULL;
    size_t length = wire_agreement_encode(&message, &bytes);
    if (length != size || memcmp(bytes, data, size) != 0)
        abort(); /* one encoding per message */
    wire_agreement_free(&message);
    free(bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_negotiation(data, size);
    check_agreement(data, size);
    return 0;
}
