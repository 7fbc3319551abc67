/*
 * tuning_agreement.h — CHORUS_TUNING_FILE at init: rank 0's file agreed on by every rank, its
 * rows kept for the selection and its settings put into the parameters.
 */
#ifndef CHORUS_TUNING_AGREEMENT_H
#define CHORUS_TUNING_AGREEMENT_H

#include "../negotiation/agreement.h"
#include "tuning_file.h"

/* Every rank at init, over `agreement`'s channel, after the parameters are agreed (`params`,
 * whose CHORUS_TUNING_FILE is rank 0's): rank 0 reads the file and sends its text to every
 * rank, which parses it into `table` (so every rank selects alike, and a malformed file fails
 * init on every rank, naming the line) and uses its settings; the caller gives its rows to the
 * executors. Ranks that hold a different copy at the same path are named in a warning: rank
 * 0's is used. Nothing happens without a file. */
chorus_status tuning_agree_on_file(const struct agreement *agreement, struct param_set *params,
                                   struct tuning_table *table, char *error, size_t error_size);

#endif
