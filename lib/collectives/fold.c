/*
 * fold.c — see fold.h. Example, p = 5 (2^2 + 1): rank 0 sends to rank 1 and sits out;
 * participants are virtual ranks 0..3 = real ranks 1, 2, 3, 4. At the end rank 1 sends the
 * result back to rank 0.
 */
#include "fold.h"
#include "reduce.h"

void fold_plan(int rank, int nranks, struct fold *fold)
{
    int power = 1;
    while (power * 2 <= nranks)
        power *= 2;
    fold->power_of_two = power;
    fold->remainder = nranks - power;
    if (rank < 2 * fold->remainder)
        fold->virtual_rank = rank % 2 == 0 ? -1 : rank / 2;
    else
        fold->virtual_rank = rank - fold->remainder;
}

int fold_real_rank(const struct fold *fold, int virtual_rank)
{
    return virtual_rank < fold->remainder ? virtual_rank * 2 + 1
                                          : virtual_rank + fold->remainder;
}

chorus_status fold_in(const struct allreduce_args *args, const struct fold *fold, void *tmp)
{
    struct transport *transport = args->transport;
    int r = transport->rank;
    size_t bytes = args->count * chorus_dtype_size(args->dtype);
    if (r >= 2 * fold->remainder)
        return CHORUS_OK;
    struct transport_request request;
    chorus_status status;
    if (r % 2 == 0) {
        status = transport_isend(transport, args->buffer, bytes, r + 1, TAG_FOLD, &request);
    } else {
        status = transport_irecv(transport, tmp, bytes, r - 1, TAG_FOLD, &request);
    }
    if (status == CHORUS_OK)
        status = transport_waitall(transport, 1, &request);
    if (status == CHORUS_OK && r % 2 == 1)
        reduce_into(args->buffer, tmp, args->count, args->dtype, args->op);
    return status;
}

chorus_status fold_out(const struct allreduce_args *args, const struct fold *fold)
{
    struct transport *transport = args->transport;
    int r = transport->rank;
    size_t bytes = args->count * chorus_dtype_size(args->dtype);
    if (r >= 2 * fold->remainder)
        return CHORUS_OK;
    struct transport_request request;
    chorus_status status =
        r % 2 == 1
            ? transport_isend(transport, args->buffer, bytes, r - 1, TAG_UNFOLD, &request)
            : transport_irecv(transport, args->buffer, bytes, r + 1, TAG_UNFOLD, &request);
    if (status == CHORUS_OK)
        status = transport_waitall(transport, 1, &request);
    return status;
}

chorus_status fold_begin(const struct allreduce_args *args, struct fold *fold, void **incoming)
{
    *incoming = scratch_reserve(args->scratch, args->count * chorus_dtype_size(args->dtype));
    if (*incoming == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    fold_plan(args->transport->rank, args->transport->nranks, fold);
    return fold_in(args, fold, *incoming);
}
