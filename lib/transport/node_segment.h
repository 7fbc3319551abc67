/*
 * node_segment.h — memory shared by the ranks of one host, for the hierarchical allreduce:
 * staging areas per rank (used in turn, so that one chunk is staged while the previous one
 * is read), and a progress counter per rank on its own cache line, through which the ranks of
 * the host wait for each other without MPI. Next to the counter, on the same cache line, each
 * rank has a mailbox of a few words through which the single-copy algorithms publish the
 * addresses of their buffers for one call; those algorithms then copy straight between the
 * ranks' buffers with Linux's cross-memory attach (process_vm_readv / process_vm_writev), where
 * the host allows it.
 *
 * The staging areas are written with ordinary or with streaming (non-temporal) stores, the
 * same on every rank of the host, decided once per job from its topology (CHORUS_STAGING_STORES
 * overrides it). A rank writes each staging area again soon after its peers have read it.
 * Where the ranks' cores share their last-level cache, ordinary stores are fastest: the area
 * stays in that cache and a peer reads it from there. Where they sit under different caches
 * (other sockets, other core complexes), every ordinary store to a line a peer has read must
 * first invalidate the peer's copy, far away; a streaming store writes the line to memory
 * without asking for it, and the peer reads it from memory. Measured on the development VM
 * (2 cores, 2026-11-22), whose hypervisor moves its two virtual CPUs between a placement that
 * shares a cache and one that does not: a 512 KiB area that the other core had just read was
 * written at 2.3 GB/s with ordinary stores and 16 GB/s with streaming ones when the cores sat
 * apart, and at 11.6 against 8.6 GB/s when they shared the cache; ResNet-50's gradients at np=2
 * took 28-29 ms a step apart with ordinary stores and 17-18 ms with streaming ones, and
 * together 13 against 21 ms.
 *
 * Between processes the memory comes from MPI_Win_allocate_shared (node_segment_mpi.c); in unit
 * tests the "ranks" are threads and it is ordinary memory (node_segments_create_local).
 */
#ifndef CHORUS_NODE_SEGMENT_H
#define CHORUS_NODE_SEGMENT_H

#include "../core/scratch.h"
#include "host_parts.h"
#include "point_to_point.h"
#include "streaming_copy.h"

#include <stdatomic.h>

#define NODE_MAX_LOCAL_RANKS 256
#define NODE_MAX_STAGING_AREAS 16

/* Words of a rank's mailbox: whether its copies in the current call failed, the address of its
 * buffer, and two for a number it shares with the others (node_segment_largest). */
enum node_mailbox_slot { NODE_MAILBOX_FAILED, NODE_MAILBOX_ADDRESS, NODE_MAILBOX_VALUES };

/* How the staged algorithms write the staging areas (CHORUS_STAGING_STORES). */
enum staging_stores {
    STAGING_STORES_AUTO,      /* from the topology: see staging_stores_streaming */
    STAGING_STORES_CACHED,    /* ordinary stores */
    STAGING_STORES_STREAMING, /* non-temporal stores, straight to memory */
};

/* Whether staging areas are written with streaming stores, for `stores` on a host whose ranks
 * do or do not all run under one last-level cache (`share_cache`), and do or do not share
 * cores (`share_cores`: more ranks than cores). Ordinary stores only pay where the area stays
 * in a cache the reader shares and nothing else evicts it first: with ranks taking turns on a
 * core, each one's working set evicts the others'. Measured on the development VM (np=4 on 2
 * cores, unpinned, ResNet-50 steps, 2026-11-23): ordinary stores 35-110 ms from run to run,
 * streaming ones 46-54 ms. */
static inline bool staging_stores_streaming(enum staging_stores stores, bool share_cache,
                                            bool share_cores)
{
    return stores == STAGING_STORES_STREAMING ||
           (stores == STAGING_STORES_AUTO && (!share_cache || share_cores));
}

struct node_segment {
    int local_rank;
    int local_size;
    size_t chunk_bytes;                               /* bytes of each staging area */
    unsigned char *staging[NODE_MAX_LOCAL_RANKS][NODE_MAX_STAGING_AREAS]; /* rank r's areas */
    unsigned staging_areas; /* allocated per rank: a power of two, 2..NODE_MAX_STAGING_AREAS */
    unsigned areas_in_use;  /* the current call's: a power of two, 2..staging_areas */
    bool streaming;         /* staging areas are written with streaming stores (every rank) */
    unsigned char *own_result; /* chunk_bytes at the end of this rank's part, which only it
                                  uses: where a reduction with streaming stores lands before
                                  it is copied into a staging area */
    _Atomic uint64_t *progress[NODE_MAX_LOCAL_RANKS]; /* local rank r's barrier counter */
    uint64_t *mailbox[NODE_MAX_LOCAL_RANKS];          /* local rank r's mailbox words */
    int pids[NODE_MAX_LOCAL_RANKS];                   /* local rank r's process */
    bool single_copy; /* every rank may copy to and from every other's memory */
    /* The ranks' shared heaps (shared_heap.h). shared_heap: every rank holds every other's
     * (decided at creation, alike on every rank). Local rank r's heap is mapped here at heap[r]
     * over its first heap_mapped[r] bytes, of heap_reserved[r]; heap_files[r] is this process's
     * handle on it (-1 for its own heap, which is mapped whole). */
    bool shared_heap;
    unsigned char *heap[NODE_MAX_LOCAL_RANKS];
    size_t heap_mapped[NODE_MAX_LOCAL_RANKS];
    size_t heap_reserved[NODE_MAX_LOCAL_RANKS];
    int heap_files[NODE_MAX_LOCAL_RANKS];
    uint64_t sequence;                              /* this rank's last barrier */
    uint64_t next_turn;       /* the turn the next algorithm starts at */
    bool yield_while_waiting;                       /* more ranks than cores on this host */
    double timeout_seconds; /* a barrier gives up on a peer after this long (0: never) */
    int stuck_rank;         /* the local rank a barrier gave up on, or -1 */
    bool stuck_ended;       /* ... because its process ended (node_segment_ended) */
    /* Every rank sees every other's process in /proc (one pid namespace): a wait asks whether
     * the rank it waits for still runs (node_segment_ended), every NODE_PROCESS_LOOK_SECONDS
     * once it waited that long, instead of waiting out the timeout for a dead one. */
    bool watch_processes;
    uint64_t starts[NODE_MAX_LOCAL_RANKS]; /* local rank r's process's start time */
    void (*waiting)(void *context); /* called now and then while a barrier waits (may be NULL) */
    void *waiting_context;
    struct transport *cross;  /* the ranks of the same local rank on the other hosts, or NULL */
    struct scratch cross_scratch;
    void *owner; /* what to free: the MPI window, the parts' files, or the local allocation */
    bool over_links; /* made by node_segment_create_links */
};

/* The algorithms use the staging areas in turn, chunk after chunk and across calls: a peer
 * may still read the area of one call's last chunk while this rank stages the next call's first
 * chunk. An algorithm that needs `chunks` turns takes them in a row, rotating through `areas`
 * areas (a power of two, the same on every rank); returns the first. Because every count of
 * areas is a power of two, turns in a row land in areas of different parity, so they never share
 * an area even when the count changes between calls. */
static inline size_t node_segment_take_turns(struct node_segment *segment, size_t chunks,
                                             unsigned areas)
{
    segment->areas_in_use = areas;
    uint64_t first = segment->next_turn;
    segment->next_turn += chunks;
    return (size_t)first;
}

/* Local rank `rank`'s staging area for turn `turn`. */
static inline unsigned char *node_staging(const struct node_segment *segment, int rank,
                                          size_t turn)
{
    return segment->staging[rank][turn & (segment->areas_in_use - 1)];
}

/* The staging areas to allocate per rank for `requested` (0: the default, 2). */
unsigned node_staging_areas(unsigned requested);
/* Sets up a new segment's staging: `areas` allocated, written with streaming stores or not. */
void node_segment_set_staging(struct node_segment *segment, unsigned areas, bool streaming);

/* Bytes of chunk `index` when `total` bytes are cut into chunks of `chunk_bytes` (0 past the
 * end). */
static inline size_t node_chunk_length(size_t total, size_t chunk_bytes, size_t index)
{
    size_t offset = index * chunk_bytes;
    if (offset >= total)
        return 0;
    return total - offset < chunk_bytes ? total - offset : chunk_bytes;
}

/* Waits until every local rank has reached the same barrier. With streaming stores it first
 * orders them before the barrier (they are weakly ordered), so that what a rank staged is there
 * for the peers that pass it. A peer that does not arrive within `timeout_seconds` (stopped,
 * or dead where nothing noticed), or whose process ended (stuck_ended: seen within
 * NODE_PROCESS_LOOK_SECONDS where processes are watched), is given up on: stuck_rank names
 * it, and this and every later barrier return at once, so that the algorithm ends (on data that
 * means nothing) and the caller reports it (node_segment_stuck). */
void node_segment_barrier(struct node_segment *segment);
/* The local rank a barrier gave up on, or -1. */
static inline int node_segment_stuck(const struct node_segment *segment)
{
    return segment->stuck_rank;
}

/* The copy that writes staging areas: with the kind of store the segment uses. */
static inline copy_function node_stage_copier(const struct node_segment *segment)
{
    return segment->streaming ? streaming_copy_nontemporal : streaming_copy_cached;
}

/* Copies into a staging area, with the kind of store the segment uses. */
static inline void node_stage_copy(const struct node_segment *segment, void *area,
                                   const void *from, size_t bytes)
{
    node_stage_copier(segment)(area, from, bytes);
}

/* A rank that stops after a fatal error poisons its barrier counter: every barrier then lets
 * the others through at once instead of waiting for it forever, copies to and from it are
 * refused, and the others finish the algorithm they are in (on data that no longer means
 * anything) and see afterwards, by node_segment_poisoned(), that it failed. The poison stays
 * until the segment is destroyed. */
#define NODE_POISON UINT64_MAX
void node_segment_poison(struct node_segment *segment);
/* The lowest local rank whose counter is poisoned, or -1. */
int node_segment_poisoned(const struct node_segment *segment);

/* Single copy between this rank's memory and local rank `peer`'s (an address it published).
 * Returns false if the kernel refused or copied less. */
bool node_copy_from_peer(const struct node_segment *segment, int peer, void *local,
                         uint64_t remote, size_t bytes);
bool node_copy_to_peer(const struct node_segment *segment, int peer, uint64_t remote,
                       const void *local, size_t bytes);

/* A single-copy algorithm's frame: publish() writes the address of this rank's buffer to its
 * mailbox and waits for everyone's (then node_peer_address gives them); finish() records whether
 * this rank's copies succeeded, waits until every rank has finished its copies (their buffers
 * may be reused after it), and fails on every rank when any rank's copies failed, not only on
 * the one that saw it. */
void node_single_copy_publish(struct node_segment *segment, const void *buffer);
static inline uint64_t node_peer_address(const struct node_segment *segment, int peer)
{
    return segment->mailbox[peer][NODE_MAILBOX_ADDRESS];
}
chorus_status node_single_copy_finish(struct node_segment *segment, bool copied, char *error,
                                      size_t error_size);

/* Local rank `rank`'s shared heap at `offset`, mapped in this process for at least `bytes`
 * (mapping more of it first where needed), or NULL where that fails. Only the background thread
 * calls it: the mappings belong to the segment. */
unsigned char *node_heap_at(struct node_segment *segment, int rank, uint64_t offset,
                            size_t bytes);
/* Opens the peers' heaps, from each local rank's process, heap file descriptor (-1: it has none)
 * and reservation; false (closing what it opened) where any fails. */
bool node_heap_open_peers(struct node_segment *segment, const int *files, const size_t *bytes);
/* Unmaps and closes the peers' heaps. */
void node_heap_close_peers(struct node_segment *segment);

/* Waits until every local rank has reached this point, and returns the lowest local rank that
 * did not succeed, or -1: every rank learns the same. */
int node_segment_first_failed(struct node_segment *segment, bool succeeded);

/* The largest of every local rank's `value`, the same on all of them (one barrier). */
uint64_t node_segment_largest(struct node_segment *segment, uint64_t value);

/* Learns every local rank's process, whether each may copy from every other, and whether each
 * may map every other's shared heap (sets pids, single_copy, shared_heap), collective over
 * `exchange`. Container seccomp profiles and Yama's ptrace_scope >= 1 forbid the copies, and
 * then the algorithms stage through the segment instead; a heap that cannot be created or
 * opened leaves tensors in it to the staged algorithms too. Every rank sees the same answers. */
void node_segment_probe_peers(struct node_segment *segment, const struct host_exchange *exchange);

/* How often a wait on a peer asks whether its process still runs: 10 ms, a small part of the
 * 15-35 ms in which UCX reports a lost peer, at one read of /proc per look. */
#define NODE_PROCESS_LOOK_SECONDS 0.01
/* The start time of process `pid` (/proc/<pid>/stat's field 22), or 0 where there is no such
 * process or it has ended (a zombie not yet reaped). */
uint64_t node_process_start(int pid);
/* Whether local rank `rank`'s process has ended (or its pid now names another process); false
 * where processes are not watched. node_segment_first_ended: the first such rank, or -1. */
bool node_segment_ended(const struct node_segment *segment, int rank);
int node_segment_first_ended(const struct node_segment *segment);

/* Whether every rank of the host may copy from every other (decides `single_copy`): each rank
 * reads a known word of every peer. `words[r]` is the address of local rank r's word, whose
 * value must be node_probe_value(pid of r). */
bool node_probe_peers(const struct node_segment *segment, const uint64_t *words);
static inline uint64_t node_probe_value(int pid)
{
    return 0x63686f7275730000ull ^ (uint64_t)(unsigned)pid;
}

/* The layout of one rank's part of the segment, shared by both constructors: a cache line with
 * its progress counter and mailbox, then its staging areas, then its own result area. It lives
 * in the segment so that the segment's one collective allocation provides it: a separate
 * allocation could fail on one rank only, before the others' collective call. part_bytes() is
 * the size of a part; map_part() points local rank `rank`'s counter, mailbox and areas (and this
 * rank's own result area) into its part at `part` (after the segment's chunk size and staging
 * areas are set). */
size_t node_segment_part_bytes(unsigned staging_areas, size_t chunk_bytes);
void node_segment_map_part(struct node_segment *segment, int rank, unsigned char *part);

/* For tests: `local_size` segments over one piece of ordinary memory, one per thread (which
 * share the process's caches: STAGING_STORES_AUTO means ordinary stores). Free with
 * node_segments_destroy_local. */
struct node_segment *node_segments_create_local(int local_size, size_t chunk_bytes,
                                                unsigned staging_areas,
                                                enum staging_stores stores);
void node_segments_destroy_local(struct node_segment *segments);

/* Over MPI: collective over `node_comm` (the ranks of this host, an MPI_Comm passed by
 * pointer); `cross_comm` groups the ranks of the same local rank across hosts. `streaming`
 * must be the same on every rank of the host. */
chorus_status node_segment_create_mpi(struct node_segment *segment, const void *node_comm,
                                      const void *cross_comm, size_t chunk_bytes,
                                      unsigned staging_areas, bool streaming,
                                      bool yield_while_waiting, char *error,
                                      size_t error_size);
void node_segment_destroy_mpi(struct node_segment *segment);
/* After a fatal error, when the window cannot be freed (that takes every local rank): keeps what
 * MPI may still touch until MPI is finalized (retained.h). */
void node_segment_retain_mpi(struct node_segment *segment);

/* In a world without MPI (lib/coordinator/world_links.h): collective over `exchange` (the
 * ranks of this host) and, where `hosts` > 1, over `world`, whose ranks `cross_members` (one per
 * host, this rank among them) become the segment's cross transport. The parts are memory files
 * (host_parts.h). `world` must outlive the segment. */
chorus_status node_segment_create_links(struct node_segment *segment,
                                        const struct host_exchange *exchange,
                                        struct transport *world, const int *cross_members,
                                        int hosts, size_t chunk_bytes, unsigned staging_areas,
                                        bool streaming, bool yield_while_waiting, char *error,
                                        size_t error_size);
void node_segment_destroy_links(struct node_segment *segment);
/* After a fatal error: keeps what a transfer may still touch (retained.h). */
void node_segment_retain_links(struct node_segment *segment);

/* The segment's release by its maker's kind (MPI or links): freed, or, after a fatal error
 * (`in_use`), kept as the retain functions say. */
void node_segment_release(struct node_segment *segment, bool in_use);

#endif
