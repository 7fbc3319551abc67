/*
 * staging_depth.c — how many staging areas a hierarchical allreduce rotates through.
 *
 * A rank writes each staging area again after its peers have read it. While the ranks' cores
 * share their caches, two areas are fastest: the whole working set stays in cache. When the
 * cores sit far apart (other sockets, other core complexes, or a hypervisor that moves virtual
 * CPUs between them), every such write must first invalidate the copy of the line in the
 * reader's cache, and a deep rotation is faster: by the time a line is written again, the
 * reader's copy has aged out. On the 2-core development VM, whose virtual CPUs move between
 * such placements every few seconds (a cache-line round trip of 55 ns in one, 330 ns in the
 * other), a 16 MiB allreduce at np=2 took (medians, 10 interleaved runs each, 2026-11-22):
 *
 *   staging areas      near placement   far placement
 *   2                  2.2 ms           10.4 ms
 *   8                  2.3 ms            7.1 ms
 *   16                 3.7 ms            4.7 ms
 *
 * Neither count wins everywhere and the placement changes while a job runs, so local rank 0
 * measures each allreduce of several chunks (from its first barrier, so that a late peer does
 * not count), keeps the speed reached with two areas and with all of them per size class,
 * uses the one that is faster in the class of the last call (by a margin, to not follow noise),
 * and tries the other on every 32nd measured call. A new class starts with the count preferred
 * so far and tries the other on its third call (its first runs cold and is not kept).
 * Comparing across sizes misled it: after 4 MiB calls, the first 64 MiB calls looked slow
 * against the old 4 MiB speed of the other count, and it switched to the wrong one. It
 * publishes the count for the next allreduce in its mailbox; see node_segment.h for why every
 * rank reads the same count. In 5 interleaved runs each, ResNet-50's gradients at np=2 took
 * 30-34 ms per step in the far placement against 64-66 ms with two areas, and 17 ms in the
 * near one either way.
 *
 * With more ranks than cores, calls take as long as the scheduler lets them, and single calls
 * are noisier: there the other count must be 1.5 times as fast, not 1.2. The choice matters
 * there too: at np=4 on the 2-core VM, whole runs fall into a fast and a slow mode (the same
 * work, memmove and the reductions 3-4x slower under perf). ResNet-50 steps (8 interleaved
 * runs, 2026-11-22): two areas 37-42 ms fast, 115 ms slow; chosen per call 36-42 ms fast,
 * 69-73 ms slow. chorus-bench 16 / 64 MiB (3 interleaved runs): two areas 6.1-18.7 / 67-72 ms,
 * chosen per call 5.6-7.3 / 23.5-25.0 ms. An earlier version, with the 1.2 margin everywhere,
 * had cost 25-45% at np=4 where two areas were right, and left such hosts at two.
 */
#include "node_segment.h"

/* Allreduces of fewer chunks are not measured: their time says little about bandwidth. */
#define MEASURED_CHUNKS 4
/* One measured call in this many runs with the other count, to notice a change. */
#define EXPLORE_EVERY 32
/* The other count must have been this much faster to be preferred: single calls are noisy,
 * more so on a host with more ranks than cores. */
#define SWITCH_MARGIN 1.2
#define OVERSUBSCRIBED_SWITCH_MARGIN 1.5
/* Shared memory for staging on one host, at most, when the count is automatic. */
#define AUTOMATIC_BUDGET_BYTES ((size_t)16 << 20)

static unsigned power_of_two_at_most(unsigned value)
{
    unsigned power = 1;
    while (power * 2 <= value)
        power *= 2;
    return power;
}

unsigned node_staging_areas(unsigned requested, int local_size, size_t chunk_bytes, bool *adapt)
{
    unsigned areas = requested;
    if (requested == 0) {
        size_t per_rank = AUTOMATIC_BUDGET_BYTES / (size_t)(local_size > 0 ? local_size : 1);
        size_t fit = chunk_bytes > 0 ? per_rank / chunk_bytes : NODE_MAX_STAGING_AREAS;
        areas = fit > NODE_MAX_STAGING_AREAS ? NODE_MAX_STAGING_AREAS : (unsigned)fit;
    }
    areas = areas < 2 ? 2 : areas > NODE_MAX_STAGING_AREAS ? NODE_MAX_STAGING_AREAS : areas;
    areas = power_of_two_at_most(areas);
    *adapt = requested == 0 && areas > 2;
    return areas;
}

void node_segment_set_depth(struct node_segment *segment, unsigned areas, bool adapt,
                            bool oversubscribed)
{
    segment->depth.switch_margin = oversubscribed ? OVERSUBSCRIBED_SWITCH_MARGIN : SWITCH_MARGIN;
    segment->staging_areas = areas;
    segment->adapt_depth = adapt;
    segment->areas_in_use = 2;
    segment->next_areas = adapt ? 2 : areas;
}

unsigned node_staging_begin(struct node_segment *segment)
{
    return segment->next_areas;
}

/* Which size class a call of `chunks` chunks belongs to: speeds are compared within a class,
 * as a large call runs slower than a small one with either count. */
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
static unsigned long measured_calls(const struct staging_depth *depth)
{
    unsigned long total = 0;
    for (int class = 0; class < STAGING_SIZE_CLASSES; class++)
        total += depth->calls[class];
    return total;
}

void node_staging_measure(struct node_segment *segment, size_t bytes, size_t chunks,
                          double started)
{
    if (!segment->adapt_depth || segment->local_rank != 0)
        return;
    struct staging_depth *depth = &segment->depth;
    int used = segment->areas_in_use == 2 ? 0 : 1;
    double seconds = monotonic_seconds() - started;
    if (chunks >= MEASURED_CHUNKS && seconds > 0) {
        int class = size_class(chunks);
        depth->last_class = class;
        /* A class's first call runs cold (first touches, first use of the size): not kept.
         * Later calls in a row with one count are averaged; the first after a change replaces
         * what is known of that count, which may be from long ago. */
        if (depth->calls[class]++ > 0) {
            double *rates = depth->rate[class];
            double rate = (double)bytes / seconds;
            rates[used] = depth->last_used[class] == used && rates[used] > 0
                              ? (rates[used] + rate) / 2
                              : rate;
            depth->last_used[class] = used;
        }
    }
    /* The next call most likely has the size of the last measured one (a training step repeats
     * its calls): decide by that class. A class new to both counts goes on with the preferred
     * one, tries the other once when it has two warm calls, and from then on compares. */
    int class = depth->last_class, preferred = depth->preferred, other = 1 - preferred;
    const double *rates = depth->rate[class];
    int next = preferred;
    if (rates[preferred] > 0 && rates[other] == 0) { /* a known rate implies measured calls */
        next = depth->calls[class] >= 3 ? other : preferred;
    } else if (rates[preferred] > 0 && rates[other] > 0) {
        if (rates[other] > rates[preferred] * depth->switch_margin)
            depth->preferred = other;
        next = measured_calls(depth) % EXPLORE_EVERY == 0 ? 1 - depth->preferred
                                                          : depth->preferred;
    }
    segment->mailbox[0][NODE_MAILBOX_AREAS] = next == 0 ? 2 : segment->staging_areas;
}

void node_staging_agree(struct node_segment *segment)
{
    if (!segment->adapt_depth)
        return;
    uint64_t areas = segment->mailbox[0][NODE_MAILBOX_AREAS];
    segment->next_areas = areas == segment->staging_areas ? segment->staging_areas : 2;
}
