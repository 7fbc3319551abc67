/*
 * transport_ucx.h — the point-to-point transport over UCX (transport_ucx.c), for jobs whose ranks
 * must outlive one another: a rank that dies fails the waits of the others at once with a message
 * naming it, and the survivors form a new world in their own processes without any launcher's
 * daemons, which end the whole job when a host is lost (docs/elastic.md).
 *
 * A world is one epoch: a fabric is made per epoch, its address handed to every other rank by
 * the caller (the elastic driver; in tests, memory or pipes), then connected to all of theirs.
 *
 *     struct ucx_context *context;                         once per process
 *     ucx_context_create(&context, error, sizeof error);
 *     struct ucx_fabric *fabric;                           once per epoch
 *     ucx_fabric_create(context, epoch, &fabric, error, sizeof error);
 *     size_t bytes;
 *     const void *mine = ucx_fabric_address(fabric, &bytes);   ... exchanged ...
 *     ucx_fabric_connect(fabric, rank, nranks, addresses, error, sizeof error);
 *     transport_ucx_init(&transport, fabric);
 *
 * Built only where UCX is found (meson option `ucx`).
 */
#ifndef CHORUS_TRANSPORT_UCX_H
#define CHORUS_TRANSPORT_UCX_H

#include "point_to_point.h"

#include <stdio.h>

/* UCX's context for this process: which networks and shared-memory transports there are (read
 * from the UCX_* environment). Any number of threads may use fabrics made from it. */
struct ucx_context;
chorus_status ucx_context_create(struct ucx_context **context, char *error, size_t error_size);
/* After every fabric made from it is destroyed. NULL is ignored. */
void ucx_context_destroy(struct ucx_context *context);

/* One epoch's world as this rank sees it: its own UCX worker (whose address the other ranks
 * connect to), then a connection to every rank. Messages carry the epoch (16 bits), so traffic
 * of another epoch never matches. A fabric is used by one thread at a time. */
struct ucx_fabric;
chorus_status ucx_fabric_create(struct ucx_context *context, uint16_t epoch,
                                struct ucx_fabric **fabric, char *error, size_t error_size);
/* This rank's address for the others, valid until the fabric is destroyed. */
const void *ucx_fabric_address(const struct ucx_fabric *fabric, size_t *bytes);
/* Connects to the `nranks` ranks of the world (at most 65536), this one being `rank`:
 * addresses[r] is rank r's ucx_fabric_address (this rank's own included). Returns at once; the
 * connections finish during the first transfers. CHORUS_ERR_INVALID_ARGUMENT, or
 * CHORUS_ERR_TIMEOUT when a rank cannot be reached (it is then the fabric's lost rank), with the
 * reason in `error`. Once. */
chorus_status ucx_fabric_connect(struct ucx_fabric *fabric, int rank, int nranks,
                                 const void *const *addresses, char *error, size_t error_size);
/* The rank lost first (its connection failed: its process ended, its host was cut off), or -1.
 * From then on every wait on the fabric fails with CHORUS_ERR_TIMEOUT naming it: the world is
 * broken, and its survivors form the next epoch on new fabrics. */
int ucx_fabric_lost_rank(const struct ucx_fabric *fabric);
/* This rank in the connected fabric's world, and the world's size in *nranks. */
int ucx_fabric_rank(const struct ucx_fabric *fabric, int *nranks);
/* Closes the connections and the worker: nothing lands in any buffer afterwards, also of
 * transfers never waited for. NULL is ignored. */
void ucx_fabric_destroy(struct ucx_fabric *fabric);
/* UCX's description of the connection to `peer` (its lanes: which transports and devices carry
 * which messages) onto `out`, for reports. */
void ucx_fabric_describe(struct ucx_fabric *fabric, int peer, FILE *out);

/* The transport over a connected fabric. */
void transport_ucx_init(struct transport *transport, struct ucx_fabric *fabric);

/* Whole messages of any length, for the negotiation channel and the abort notices over UCX
 * (channel_ucx.c, abort_ucx.c). Their tags (below 2^31) never match the transport's. Any thread
 * may call these at any time (they hold a lock of the fabric's); the transport's calls on the
 * same fabric must not run beside them. Once the fabric lost a rank, every call fails with
 * CHORUS_ERR_TIMEOUT and the reason in `error` (ucx_fabric_lost_rank names the rank). */
chorus_status ucx_message_send(struct ucx_fabric *fabric, int peer, int tag, const void *bytes,
                               size_t length, void **pending, char *error, size_t error_size);
/* Whether the send left in `pending` (NULL: it finished when posted) is done, failed ones
 * included; frees it when so. Progresses the worker. */
bool ucx_message_sent(struct ucx_fabric *fabric, void *pending);
/* Lets a send go on unwatched (UCX frees it when it ends, or with the fabric): its bytes must
 * stay until the fabric is destroyed (ucx_message_keep). */
void ucx_message_abandon(struct ucx_fabric *fabric, void *pending);
/* Frees `memory` (from malloc) when the fabric is destroyed, when UCX can no longer touch it. */
void ucx_message_keep(struct ucx_fabric *fabric, void *memory);
/* Sends `bytes` (malloc'd; the fabric keeps them) to every other rank, unwatched, also after
 * the fabric lost a rank (to all but that one): an abort notice. */
void ucx_message_notify(struct ucx_fabric *fabric, int tag, void *bytes, size_t length);
/* Takes one message of `tag` from `source` (-1: any rank) that has arrived, whole: *bytes
 * (malloc'd, also when empty; the caller frees), *length, *sender. *bytes NULL when none was
 * there. Messages from one rank with one tag are taken in the order they were sent. */
chorus_status ucx_message_take(struct ucx_fabric *fabric, int source, int tag, uint8_t **bytes,
                               size_t *length, int *sender, char *error, size_t error_size);

#endif
