/*
 * simulated_ranks.h — N ranks negotiating in one process, without MPI: each with its own
 * response cache, ready rounds and pending tensors; rank 0 with the real negotiator. Messages
 * are really encoded and decoded (wire.c); a round's allreduce is the AND of every rank's
 * contribution. What the background thread does between those pieces (exchange.c, rounds.c)
 * is mirrored here step for step. The unit tests check that every rank runs the same list in
 * the same order; the scaling benchmark times rank 0's share and counts its messages.
 */
#ifndef CHORUS_SIMULATED_RANKS_H
#define CHORUS_SIMULATED_RANKS_H

#include "../../lib/negotiation/negotiation.h"
#include "../../lib/negotiation/ready_rounds.h"

enum simulated_protocol { SIMULATED_STAR, SIMULATED_ROUNDS };

/* What rank 0 did: its CPU time in negotiation (decoding, negotiating, encoding, its share of
 * the rounds) and the messages it sent and received. */
struct rank0_work {
    double seconds;
    size_t messages_in;
    size_t messages_out;
    size_t cycles;
};

struct simulated_ranks;

struct simulated_ranks *simulated_ranks_create(int nranks, enum simulated_protocol protocol,
                                               size_t cache_capacity, double demote_after);
void simulated_ranks_destroy(struct simulated_ranks *world);

/* Rank `rank` submits `request` (copied) at time `now`. */
void simulated_submit(struct simulated_ranks *world, int rank, const struct wire_request *request,
                      double now);
void simulated_join(struct simulated_ranks *world, int rank);

/* One negotiation cycle at time `now`: every rank sends what is new to rank 0; rank 0 answers
 * (star), or every rank takes part in one round (rounds); every rank runs what was agreed.
 * With warn_after or stall_fail > 0, rank 0 inspects stalls first, as its thread does. */
void simulated_cycle(struct simulated_ranks *world, double now, double warn_after,
                     double stall_fail);

/* What rank `rank` ran, in order, one line each: "run NAME", "error NAME STATUS: MESSAGE",
 * "join done". */
size_t simulated_log(const struct simulated_ranks *world, int rank, const char *const **lines);
/* Stall warnings rank 0 gave. */
size_t simulated_warnings(const struct simulated_ranks *world, const char *const **lines);
/* Tensors still waiting on rank `rank`. */
size_t simulated_pending(const struct simulated_ranks *world, int rank);

const struct rank0_work *simulated_rank0_work(const struct simulated_ranks *world);
void simulated_reset_work(struct simulated_ranks *world);
/* Streams through `bytes` at the start of every cycle (0: not), so that rank 0's data is cold
 * when its share begins, while what the other ranks computed for it meanwhile (its received
 * messages) is not. The simulated ranks
 * share one process, so the more of them there are, the more of rank 0's data the others evict
 * between its turns, which no real rank 0 suffers; evicting as much at every N keeps the
 * comparison across N fair. (A real rank 0 runs collectives and the model between cycles, which
 * leave its caches about as cold.) */
void simulated_evict_caches(struct simulated_ranks *world, size_t bytes);
/* Whether runs are logged (on at first; a benchmark at thousands of ranks turns it off). */
void simulated_keep_logs(struct simulated_ranks *world, bool keep);

#endif
