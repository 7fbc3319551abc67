/*
 * allreduce_adasum.c — Adasum, the adaptive summation of Horovod's op=Adasum. Two vectors a and
 * b combine as
 *     (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b,
 * which is their sum when they are orthogonal and their average when they are equal; a zero
 * vector leaves the other as it is (a joined rank's stand-in). The ranks combine up a binomial
 * tree in rank order: at distance d = 1, 2, 4, ... rank r (r mod 2d = 0) combines its partial
 * result, first, with that of rank r + d. Rank 0 then holds the result and sends it back down
 * the same tree, so that every rank ends with the same bits. Dot products are taken in double,
 * and float16 vectors are combined in float (each partial result rounded to float16, as
 * Horovod's CPU Adasum stores it).
 *
 * Cost: 2 ceil(log2 p) steps of the whole tensor, which is not bandwidth-optimal (Horovod's
 * vector-halving form is); Adasum is for the gradients of a training step, where the point is
 * the combination, not the bandwidth.
 *
 * Example, p = 3: rank 0 combines rank 1's vector into its own (a0 then a1), then rank 2's (the
 * partial first); rank 0 sends the result to 2, then to 1.
 */
#include "algorithms.h"

#include "../core/dtype.h"

#include <math.h>

static chorus_status send_whole(struct transport *transport, const void *buffer, size_t bytes,
                                int peer)
{
    struct transport_request request;
    chorus_status status = transport_isend(transport, buffer, bytes, peer, TAG_ADASUM, &request);
    return status != CHORUS_OK ? status : transport_waitall(transport, 1, &request);
}

static chorus_status receive_whole(struct transport *transport, void *buffer, size_t bytes,
                                   int peer)
{
    struct transport_request request;
    chorus_status status = transport_irecv(transport, buffer, bytes, peer, TAG_ADASUM, &request);
    return status != CHORUS_OK ? status : transport_waitall(transport, 1, &request);
}

static double element_at(const void *data, size_t i, chorus_dtype dtype)
{
    if (dtype == CHORUS_FLOAT16)
        return half_to_float(((const uint16_t *)data)[i]);
    return dtype == CHORUS_FLOAT64 ? ((const double *)data)[i] : ((const float *)data)[i];
}

/* a = combine(a, b). */
static void combine(void *a, const void *b, size_t count, chorus_dtype dtype)
{
    double aa = 0, bb = 0, ab = 0;
    for (size_t i = 0; i < count; i++) {
        double x = element_at(a, i, dtype), y = element_at(b, i, dtype);
        aa += x * x;
        bb += y * y;
        ab += x * y;
    }
    double wa = aa > 0 ? 1 - ab / (2 * aa) : 0, wb = bb > 0 ? 1 - ab / (2 * bb) : 0;
    if (aa == 0)
        wb = 1;
    if (bb == 0)
        wa = 1;
    for (size_t i = 0; i < count; i++) {
        double value = wa * element_at(a, i, dtype) + wb * element_at(b, i, dtype);
        if (dtype == CHORUS_FLOAT64)
            ((double *)a)[i] = value;
        else if (dtype == CHORUS_FLOAT16)
            ((uint16_t *)a)[i] = float_to_half((float)value);
        else
            ((float *)a)[i] = (float)value;
    }
}

chorus_status allreduce_adasum(const struct allreduce_args *args)
{
    struct transport *transport = args->transport;
    int p = transport->nranks, r = transport->rank;
    size_t bytes = args->count * chorus_dtype_size(args->dtype);
    if (p == 1 || bytes == 0)
        return CHORUS_OK;
    void *incoming = scratch_reserve(args->scratch, bytes);
    if (incoming == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    chorus_status status = CHORUS_OK;
    int top = 1;
    while (top < p)
        top <<= 1;
    /* Up the tree: a rank sends its partial result once and is done. */
    for (int d = 1; d < top && status == CHORUS_OK; d <<= 1) {
        if (r % (2 * d) == d) {
            status = send_whole(transport, args->buffer, bytes, r - d);
            break;
        }
        if (r + d < p) {
            status = receive_whole(transport, incoming, bytes, r + d);
            if (status == CHORUS_OK)
                combine(args->buffer, incoming, args->count, args->dtype);
        }
    }
    /* Down the same tree. */
    for (int d = top / 2; d >= 1 && status == CHORUS_OK; d >>= 1) {
        if (r % (2 * d) == 0 && r + d < p)
            status = send_whole(transport, args->buffer, bytes, r + d);
        else if (r % (2 * d) == d)
            status = receive_whole(transport, args->buffer, bytes, r - d);
    }
    return status;
}
