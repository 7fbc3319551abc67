/*
 * wait.c — chorus_wait: a thread that waits for its operation first turns the background
 * thread's loop itself while the loop's turn is free (coord_drive), so that what the background
 * thread would have been woken to do (send the request, take rank 0's answer, run the
 * collective) happens on the waiting thread, with no hand-off between the two; then it waits
 * as the handle does (handle_wait).
 */
#include "instance.h"

#include "../coordinator/coordinator.h"
#include "../core/handle.h"

chorus_status chorus_wait(chorus_handle *handle)
{
    if (handle == NULL)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_wait: handle is NULL");
    int status = atomic_load_explicit(&handle->status, memory_order_acquire);
    if (status != CHORUS_IN_PROGRESS)
        return status;
    struct chorus_context *context = api_instance_acquire();
    if (context != NULL) {
        coord_drive(context, handle);
        api_instance_release();
    }
    return handle_wait(handle);
}
