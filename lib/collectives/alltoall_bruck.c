/*
 * alltoall_bruck.c — Bruck's alltoall, for blocks of one size on every rank (the ranks agreed on
 * it: an alltoall split evenly everywhere, or the exchange of splits before an uneven one). Rank
 * r first lays out its blocks rotated, slot i holding the block for rank r + i. In the round of
 * distance d (1, 2, 4, ...) it sends every slot whose index has bit d set to rank r + d and
 * receives the same slots from rank r - d. A block in slot i thus travels i ranks in the rounds
 * of i's bits and ends at its destination, where slot i then holds the block from rank r - i.
 *
 * Cost: ceil(log2 p) messages per rank instead of the pairwise exchange's p - 1, each of about
 * half the blocks, so every block moves about log2(p)/2 times: for small blocks, where the
 * number of messages dominates (the 16-byte exchange of splits at 1,024 ranks: 10 messages
 * against 1,023). Blocks of different sizes are declined (the pairwise exchange runs them): a
 * rank forwarding another's blocks would not know their sizes.
 *
 * Example, p = 3: round d=1 sends slot 1 (for r+1) to r+1; round d=2 sends slot 2 (for r+2) to
 * r+2; slot 2 then holds the block from r-2 = r+1.
 */
#include "algorithms.h"

#include <string.h>

chorus_status alltoall_bruck(const struct alltoall_args *args)
{
    struct transport *transport = args->transport;
    int p = transport->nranks, r = transport->rank;
    size_t block = args->send_bytes[0];
    if (!args->same_blocks || args->scratch == NULL || block == 0)
        return CHORUS_ERR_NOT_SUPPORTED;
    size_t most_sent = ((size_t)p + 1) / 2; /* slots with any one bit set, at most */
    char *slots = scratch_reserve(args->scratch, ((size_t)p + 2 * most_sent) * block);
    if (slots == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    char *outgoing = slots + (size_t)p * block, *incoming = outgoing + most_sent * block;
    const char *send = args->send;
    for (int i = 0; i < p; i++)
        memcpy(slots + (size_t)i * block, send + args->send_offsets[(r + i) % p], block);
    for (int distance = 1; distance < p; distance *= 2) {
        size_t count = 0;
        for (int i = distance; i < p; i++)
            if (i & distance)
                memcpy(outgoing + count++ * block, slots + (size_t)i * block, block);
        chorus_status status =
            transport_sendrecv(transport, outgoing, count * block, (r + distance) % p, incoming,
                               count * block, (r - distance + p) % p, TAG_ALLTOALL);
        if (status != CHORUS_OK)
            return status;
        count = 0;
        for (int i = distance; i < p; i++)
            if (i & distance)
                memcpy(slots + (size_t)i * block, incoming + count++ * block, block);
    }
    char *recv = args->recv;
    for (int i = 0; i < p; i++)
        memcpy(recv + args->recv_offsets[(r - i + p) % p], slots + (size_t)i * block, block);
    return CHORUS_OK;
}
