/*
 * ucx_world.h — chorus on a world over UCX, whose ranks outlive a lost host (issue #52): no
 * MPI, the ranks numbered and their addresses handed out by whoever drives the job (the elastic
 * driver; test_ucx_world's parent process). Each rank:
 *
 *     struct api_ucx_world *world;
 *     api_ucx_world_create(epoch, &world);                     a world per epoch
 *     size_t bytes;
 *     const void *mine = api_ucx_world_address(world, &bytes); to the driver, which hands
 *                                                              every rank all ranks' addresses
 *     api_ucx_world_start(world, rank, size, host, addresses, options);   chorus_init
 *     ...                                                      chorus's calls
 *     chorus_shutdown();
 *     api_ucx_world_destroy(world);    once every rank has shut down (the driver knows): a
 *                                      closed connection looks like a lost rank to the others
 *
 * Part of the UCX library (meson.build says why it is not in libchorus yet). Failures return
 * a status with the reason in chorus_last_error().
 */
#ifndef CHORUS_UCX_WORLD_H
#define CHORUS_UCX_WORLD_H

#include "../core/common.h"

struct api_ucx_world;

/* UCX's context and this rank's two fabrics for epoch `epoch` (control: negotiation and abort
 * notices; data: collectives), not yet connected. */
chorus_status api_ucx_world_create(uint16_t epoch, struct api_ucx_world **world);
/* This rank's address for the others (both fabrics'), valid until the world is destroyed. */
const void *api_ucx_world_address(const struct api_ucx_world *world, size_t *bytes);
/* Connects to the `size` ranks (addresses[r]: rank r's api_ucx_world_address, this rank's own
 * included) and starts chorus on them as rank `rank`, on the host named `host` (ranks with one
 * name share a host; NULL: gethostname's). */
chorus_status api_ucx_world_start(struct api_ucx_world *world, int rank, int size,
                                  const char *host, const void *const *addresses,
                                  const chorus_init_options *options);
/* After chorus_shutdown (or a failed start). NULL is ignored. */
void api_ucx_world_destroy(struct api_ucx_world *world);

#endif
