/*
 * fuzz_wire.c — libFuzzer target for the negotiation messages' decoder: any bytes either decode
 * or are rejected with a reason, never crash or leak; what decodes encodes to bytes that decode
 * to the same message. Built and run by tools/fuzz.
 */
#include "../../lib/negotiation/wire.h"
#include "../../lib/negotiation/negotiated_fields.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wire_message message;
    char error[256];
    if (wire_decode(data, size, &message, error, sizeof error) != CHORUS_OK) {
        if (error[0] == '\0')
            abort(); /* a rejection must say why */
        return 0;
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
    return 0;
}
