/*
 * tuning_agreement.h — CHORUS_TUNING_FILE at init: rank 0's file agreed on by every rank, its
 * rows kept for the selection and its settings put into the parameters.
 */
#ifndef CHORUS_TUNING_AGREEMENT_H
#define CHORUS_TUNING_AGREEMENT_H

#include "tuning_file.h"
#include "../core/context.h"

/* Collective over the control communicator, after the parameters are agreed: rank 0 reads the
 * file named by its CHORUS_TUNING_FILE and sends its text to every rank, which parses it into
 * `table` (so every rank selects alike, and a malformed file fails init on every rank, naming
 * the line) and uses its settings; the caller gives its rows to the executors. Ranks that hold a different copy at the same path
 * are named in a warning: rank 0's is used. Nothing happens without a file. */
chorus_status tuning_agree_on_file(struct chorus_context *context, int rank, int size,
                                  struct tuning_table *table, char *error, size_t error_size);

#endif
