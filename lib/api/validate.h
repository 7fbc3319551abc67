/*
 * validate.h — the checks of a submit that need nothing but the call itself and the number of
 * ranks (of the job, or of the process set the call names; its broadcast root then a rank of
 * the set): the struct's size, the name, dtype, shape and memory of the tensor, and each
 * collective's own arguments (ops, roots, splits, scale factors). Any thread.
 */
#ifndef CHORUS_VALIDATE_H
#define CHORUS_VALIDATE_H

#include "../core/common.h"

/* CHORUS_OK, or the status of the first problem with its message in chorus_last_error(),
 * naming the tensor. */
chorus_status api_validate_op(const chorus_op_args *args, int nranks);
/* The tensor's own checks (dtype, shape, data, memory), which every call that takes one shares;
 * messages start `kind "name"`. */
chorus_status api_validate_tensor(const char *kind, const char *name,
                                  const chorus_tensor *tensor);

/* The process set the call names: 0 (every rank) from callers built before the field existed. */
int api_op_process_set(const chorus_op_args *args);
/* The caller's CHORUS_OP_* flags (0 in a struct from before flags). */
uint64_t api_op_flags(const chorus_op_args *args);
/* The caller's error_feedback and compression_ratio (NULL and 0 in a struct from before them). */
void *api_op_error_feedback(const chorus_op_args *args);
double api_op_compression_ratio(const chorus_op_args *args);
/* The caller's cuda_stream (NULL, the legacy default stream, in a struct from before it). */
void *api_op_cuda_stream(const chorus_op_args *args);
/* The caller's timeout_seconds (0 in a struct from before it). */
double api_op_timeout(const chorus_op_args *args);

#endif
