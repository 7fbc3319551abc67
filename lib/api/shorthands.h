/*
 * shorthands.h — what the blocking calls share with chorus_join (api.c).
 */
#ifndef CHORUS_SHORTHANDS_H
#define CHORUS_SHORTHANDS_H

#include "../core/common.h"

/* Waits for `handle`; on success copies the received splits (when `received_splits` is not
 * NULL, one entry per rank) and moves the output to `output` (when not NULL), which the caller
 * then owns; on failure moves the handle's message to chorus_last_error(). Frees the handle. */
chorus_status api_handle_wait_and_free(chorus_handle *handle, chorus_tensor *output,
                                   int64_t *received_splits);

#endif
