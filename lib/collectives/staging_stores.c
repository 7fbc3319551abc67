/*
 * staging_stores.c — how a hierarchical allreduce writes its staging areas: with ordinary
 * stores, or with streaming (non-temporal) stores that bypass the caches.
 *
 * A rank writes each staging area again soon after its peers have read it. While the ranks'
 * cores share their caches, ordinary stores are fastest: the area stays in cache and a peer
 * reads it from there. When the cores sit far apart (other sockets, other core complexes, or a
 * hypervisor that moves virtual CPUs between them), every ordinary store to a line a peer has
 * read must first invalidate the peer's copy, far away; a streaming store writes the line to
 * memory without asking for it, and the peer reads it from memory. On the 2-core development
 * VM, whose virtual CPUs move between such placements every few seconds to minutes (a cache-line
 * round trip of 55 ns in one, 330 ns in the other), a core wrote a 512 KiB area that the other
 * had just read at 2.3 GB/s with ordinary stores in the far placement, 16 GB/s with streaming
 * ones (8.6 against 11.6 GB/s near); the reader got 16-18 GB/s against 14 GB/s far, but
 * 27-39 GB/s against 9-11 GB/s near (two threads pinned to the two CPUs, 2026-11-22). Through
 * the whole algorithm, ResNet-50's gradients at np=2 took 28-29 ms per step far with ordinary
 * stores (deep rotations of 16 areas, this file's former choice) and 17-18 ms with streaming
 * ones; at np=4 65 against 37 ms. Near, streaming stores cost: 21 against 13 ms at np=2.
 *
 * Neither wins everywhere and the placement changes while a job runs, so local rank 0 measures
 * each allreduce of several chunks (from its first barrier, so that a late peer does not count),
 * keeps the speed reached with either kind of store per size class, uses the one that is faster
 * in the class of the last call (by a margin, to not follow noise), and tries the other on every
 * 32nd measured call. A new class starts with the kind preferred so far and tries the other on
 * its third call (its first runs cold and is not kept). Comparing across sizes misled an earlier
 * version (choosing between staging depths): after 4 MiB calls, the first 64 MiB calls looked
 * slow against the old 4 MiB speed of the other choice. It publishes the choice for the next
 * allreduce in its mailbox; see node_segment.h for why every rank reads the same one.
 *
 * With more ranks than cores, calls take as long as the scheduler lets them, and single calls
 * are noisier: there the other kind must be 1.5 times as fast, not 1.2.
 *
 * The broadcast and allgather through the segment write their staging areas with the kind
 * chosen here too: their stores meet the same distant copies.
 */
#include "node_segment.h"

/* Allreduces of fewer chunks are not measured: their time says little about bandwidth. */
#define MEASURED_CHUNKS 4
/* One measured call in this many runs with the other kind, to notice a change. */
#define EXPLORE_EVERY 32
/* The other kind must have been this much faster to be preferred: single calls are noisy,
 * more so on a host with more ranks than cores. */
#define SWITCH_MARGIN 1.2
#define OVERSUBSCRIBED_SWITCH_MARGIN 1.5

static unsigned power_of_two_at_most(unsigned value)
{
    unsigned power = 1;
    while (power * 2 <= value)
        power *= 2;
    return power;
}

unsigned node_staging_areas(unsigned requested)
{
    unsigned areas = requested < 2 ? 2 : requested > NODE_MAX_STAGING_AREAS
                                             ? NODE_MAX_STAGING_AREAS
                                             : requested;
    return power_of_two_at_most(areas);
}

void node_segment_set_staging(struct node_segment *segment, unsigned areas,
                              enum staging_stores stores, bool oversubscribed)
{
    segment->choice.switch_margin = oversubscribed ? OVERSUBSCRIBED_SWITCH_MARGIN : SWITCH_MARGIN;
    segment->staging_areas = areas;
    segment->areas_in_use = areas;
    segment->adapt_stores = stores == STAGING_STORES_AUTO;
    segment->streaming = stores == STAGING_STORES_STREAMING;
}

/* Which size class a call of `chunks` chunks belongs to: speeds are compared within a class,
 * as a large call runs slower than a small one with either kind of store. */
static int size_class(size_t chunks)
{
    int class = 0;
    while (chunks >= 2 * MEASURED_CHUNKS && class < STAGING_SIZE_CLASSES - 1) {
        chunks /= 2;
        class++;
    }
    return class;
}

/* Measured calls of every class together. */
static unsigned long measured_calls(const struct staging_choice *choice)
{
    unsigned long total = 0;
    for (int class = 0; class < STAGING_SIZE_CLASSES; class++)
        total += choice->calls[class];
    return total;
}

void node_staging_measure(struct node_segment *segment, size_t bytes, size_t chunks,
                          double started)
{
    if (!segment->adapt_stores || segment->local_rank != 0)
        return;
    struct staging_choice *choice = &segment->choice;
    int used = segment->streaming ? 1 : 0;
    double seconds = monotonic_seconds() - started;
    if (chunks >= MEASURED_CHUNKS && seconds > 0) {
        int class = size_class(chunks);
        choice->last_class = class;
        /* A class's first call runs cold (first touches, first use of the size): not kept.
         * Later calls in a row with one kind are averaged; the first after a change replaces
         * what is known of that kind, which may be from long ago. */
        if (choice->calls[class]++ > 0) {
            double *rates = choice->rate[class];
            double rate = (double)bytes / seconds;
            rates[used] = choice->last_used[class] == used && rates[used] > 0
                              ? (rates[used] + rate) / 2
                              : rate;
            choice->last_used[class] = used;
        }
    }
    /* The next call most likely has the size of the last measured one (a training step repeats
     * its calls): decide by that class. A class new to both kinds goes on with the preferred
     * one, tries the other once when it has two warm calls, and from then on compares. */
    int class = choice->last_class, preferred = choice->preferred, other = 1 - preferred;
    const double *rates = choice->rate[class];
    int next = preferred;
    if (rates[preferred] > 0 && rates[other] == 0) { /* a known rate implies measured calls */
        next = choice->calls[class] >= 3 ? other : preferred;
    } else if (rates[preferred] > 0 && rates[other] > 0) {
        if (rates[other] > rates[preferred] * choice->switch_margin)
            choice->preferred = other;
        next = measured_calls(choice) % EXPLORE_EVERY == 0 ? 1 - choice->preferred
                                                           : choice->preferred;
    }
    segment->mailbox[0][NODE_MAILBOX_STREAMING] = (uint64_t)next;
}

void node_staging_agree(struct node_segment *segment)
{
    if (segment->adapt_stores)
        segment->streaming = segment->mailbox[0][NODE_MAILBOX_STREAMING] != 0;
}
