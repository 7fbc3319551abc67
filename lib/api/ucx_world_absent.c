/*
 * ucx_world_absent.c — chorus_world_open and the rest (chorus.h) in a build without UCX's
 * headers: a world without MPI cannot be made, and says so.
 */
#include "instance.h"

chorus_status chorus_world_open(int number, chorus_world **world)
{
    (void)number;
    if (world != NULL)
        *world = NULL;
    return REJECT(CHORUS_ERR_NOT_SUPPORTED,
                  "chorus_world_open: chorus was built without UCX (libucx-dev), which worlds "
                  "without MPI run on");
}

void chorus_world_address(const chorus_world *world, const void **address, size_t *bytes)
{
    (void)world;
    *address = NULL;
    *bytes = 0;
}

chorus_status chorus_init_world(chorus_world *world, int rank, int size, const char *host,
                                const void *const *addresses, const chorus_init_options *options)
{
    (void)world, (void)rank, (void)size, (void)host, (void)addresses, (void)options;
    return REJECT(CHORUS_ERR_NOT_SUPPORTED, "chorus_init_world: chorus was built without UCX");
}

void chorus_world_close(chorus_world *world)
{
    (void)world;
}
