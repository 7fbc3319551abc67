/*
 * world_links.h — a world without MPI: what its maker hands chorus's background thread instead
 * of a communicator (context->links). The maker (a world over UCX, whose ranks outlive a lost
 * host; the unit tests' ranks as threads) has connected every rank and numbered them; chorus
 * negotiates over the channel, runs collectives over the transport and tells of a fatal error
 * through the abort hooks. The ranks of one host share its segment and slots as over MPI, made
 * of memory files (lib/executor/world_segments.c); negotiation rounds go through the slots where
 * every rank shares one host, else by copies (rounds.h). Lanes, process sets and
 * chorus_send/recv need MPI and are refused.
 */
#ifndef CHORUS_WORLD_LINKS_H
#define CHORUS_WORLD_LINKS_H

#include "../executor/abort.h"
#include "../negotiation/channel.h"
#include "../transport/point_to_point.h"

struct world_links {
    int rank;
    int size;
    /* This rank's host as the world's maker names it (ranks of one name share a host); NULL:
     * gethostname's. */
    const char *host;
    struct channel channel;     /* the background thread's; it releases it */
    struct transport transport; /* the executor's */
    bool (*poll_abort)(void *context, struct abort_notice *notice);
    void (*notify_abort)(void *context, const struct abort_notice *notice);
    void *abort_context;
};

#endif
