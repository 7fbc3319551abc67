/*
 * staging_stores.c — how the algorithms through the shared segment (the hierarchical allreduce,
 * the broadcast and the allgather) write their staging areas: with ordinary stores, or with
 * streaming (non-temporal) stores that bypass the caches.
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
 * Neither wins everywhere and the placement changes while a job runs, so local rank 0 measures each
 * allreduce of several chunks (from its first barrier, so that a late peer does not count, until
 * after its last, so that a slow one does), keeps the speed reached with either kind of store per
 * size class, uses the one that is faster in the class of the last call (by a margin, to not follow
 * noise), and tries the other on every 32nd measured call. A new class starts with the kind
 * preferred so far and tries the other on its third call (its first runs cold and is not kept).
 * Comparing across sizes misled an earlier version (choosing between staging depths): after 4 MiB
 * calls, the first 64 MiB calls looked slow against the old 4 MiB speed of the other choice. It
 * publishes the choice for the next call in its mailbox before the last barrier, when the current
 * call's time is not yet known: a call's time steers the call after next. See node_segment.h for
 * why every rank reads the same choice.
 *
 * With more ranks than cores, calls take as long as the scheduler lets them, and single calls
 * are noisier: there the other kind must be 1.5 times as fast, not 1.2.
 *
 * The broadcast and allgather through the segment meet the same distant copies, and are
 * measured the same way, each in its own size classes: they move other bytes in the same time.
 * The preferred kind is one for all three, so a job of allreduces also chooses for its
 * allgathers. A job without large allreduces chooses too: it used to keep ordinary stores,
 * with which the far placement made a 16 MiB broadcast at np=4 take 9.3-12.5 ms, against 4.1-5.3
 * ms with the kind it measured (8 interleaved rounds, 2026-11-22).
 *
 * Where a call's clock stops matters. Allgathers of 1 MiB at np=2 (one chunk per rank) took
 * 33-39 us with ordinary stores and 59-66 us with streaming ones, from their start until after
 * the last barrier; stopped before that barrier, as an earlier version did, the streaming calls
 * looked twice as fast as they were (the peer's slower half was left out), and the choice went
 * the wrong way.
 *
 * An allreduce is measured from its first barrier, and only from the bytes of several chunks:
 * the time of fewer says little about bandwidth. A broadcast or an allgather writes its first
 * chunk before that barrier, and one of 2 MiB at np=4 has only one chunk per rank, so they are
 * measured from their start, and from half a chunk's bytes.
 */
#include "node_segment.h"

/* Allreduces of fewer chunks' bytes are not measured (see above). */
#define MEASURED_ALLREDUCE_CHUNKS 4
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

/* The bytes of the smallest call measured. */
static size_t smallest_measured(const struct node_segment *segment,
                                enum staged_collective collective)
{
    return collective == STAGED_ALLREDUCE ? MEASURED_ALLREDUCE_CHUNKS * segment->chunk_bytes
                                          : segment->chunk_bytes / 2;
}

/* Which size class a call of `bytes` belongs to (the smallest measured up to twice as many,
 * ...): speeds are compared within a class, as a large call runs slower than a small one with
 * either kind of store. Classes go by bytes, not chunks: allgathers of 512 KiB and of 1 MiB at
 * np=2 both have one chunk per rank, yet the larger moved its bytes up to 1.6 times as fast. */
static int size_class(size_t bytes, size_t smallest)
{
    int class = 0;
    while (bytes >= 2 * smallest && class < STAGING_SIZE_CLASSES - 1) {
        bytes /= 2;
        class++;
    }
    return class;
}

/* Measured calls of every algorithm and class together. */
static unsigned long measured_calls(const struct staging_choice *choice)
{
    unsigned long total = 0;
    for (int c = 0; c < STAGED_COLLECTIVES; c++)
        for (int class = 0; class < STAGING_SIZE_CLASSES; class++)
            total += choice->speeds[c].calls[class];
    return total;
}

/* Takes in a finished call's speed. A class's first call runs cold (first touches, first use
 * of the size): not kept. Later calls in a row with one kind are averaged; the first after a
 * change replaces what is known of that kind, which may be from long ago. */
static void take_in(const struct node_segment *segment, struct staging_choice *choice,
                    const struct staged_call *call)
{
    size_t smallest = smallest_measured(segment, call->collective);
    if (call->bytes < smallest || call->seconds <= 0)
        return;
    struct staging_speeds *speeds = &choice->speeds[call->collective];
    int class = size_class(call->bytes, smallest);
    choice->last_collective = call->collective;
    choice->last_class = class;
    if (speeds->calls[class]++ == 0)
        return;
    double *rates = speeds->rate[class];
    double rate = (double)call->bytes / call->seconds;
    int used = call->used;
    rates[used] = speeds->last_used[class] == used && rates[used] > 0 ? (rates[used] + rate) / 2
                                                                        : rate;
    speeds->last_used[class] = used;
}

void node_staging_settle(struct node_segment *segment)
{
    if (!segment->adapt_stores || segment->local_rank != 0)
        return;
    struct staging_choice *choice = &segment->choice;
    if (choice->timing && choice->timed.seconds > 0) {
        take_in(segment, choice, &choice->timed);
        choice->timing = false;
    }
    /* The next call most likely is like the last measured one (a training step repeats its
     * calls): decide by that one's class. A class new to both kinds goes on with the preferred
     * one, tries the other once when it has two warm calls, and from then on compares. */
    const struct staging_speeds *speeds = &choice->speeds[choice->last_collective];
    int class = choice->last_class, preferred = choice->preferred, other = 1 - preferred;
    const double *rates = speeds->rate[class];
    int next = preferred;
    if (rates[preferred] > 0 && rates[other] == 0) { /* a known rate implies measured calls */
        next = speeds->calls[class] >= 3 ? other : preferred;
    } else if (rates[preferred] > 0 && rates[other] > 0) {
        if (rates[other] > rates[preferred] * choice->switch_margin)
            choice->preferred = other;
        next = measured_calls(choice) % EXPLORE_EVERY == 0 ? 1 - choice->preferred
                                                           : choice->preferred;
    }
    segment->mailbox[0][NODE_MAILBOX_STREAMING] = (uint64_t)next;
}

void node_staging_measure(struct node_segment *segment, enum staged_collective collective,
                          size_t bytes, double started)
{
    if (!segment->adapt_stores || segment->local_rank != 0)
        return;
    node_staging_settle(segment);
    segment->choice.timed = (struct staged_call){
        .collective = collective,
        .bytes = bytes,
        .used = segment->streaming ? 1 : 0,
        .started = started,
    };
    segment->choice.timing = true;
}

void node_staging_agree(struct node_segment *segment)
{
    if (!segment->adapt_stores)
        return;
    segment->streaming = segment->mailbox[0][NODE_MAILBOX_STREAMING] != 0;
    struct staging_choice *choice = &segment->choice;
    if (segment->local_rank == 0 && choice->timing && choice->timed.seconds == 0)
        choice->timed.seconds = monotonic_seconds() - choice->timed.started;
}
