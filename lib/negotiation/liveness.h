/*
 * liveness.h — noticing a peer that went silent during negotiation, without its cooperation.
 *
 * Between collectives the star protocol sends a message only when there is work, so a rank that
 * froze, died where no launcher noticed, or lost its network would leave the others waiting in
 * negotiation forever. Every rank therefore sends a heartbeat on the negotiation channel when it
 * has sent nothing for a while: the others to rank 0 (an empty REQUESTS message), rank 0 to every
 * other rank (an empty RESPONSES message). Rank 0 watches every rank; the others watch rank 0. A
 * peer silent for longer than the bound (CHORUS_TIMEOUT_SECONDS) has failed.
 *
 * With ready rounds (rounds.c) rank 0 sends no heartbeats: a RESPONSES message there must
 * precede its round, and a round that does not complete has a bound of its own. The other ranks
 * still send theirs, so that rank 0 can name a rank that stopped taking part.
 *
 * Silence is counted from the later of the peer's last message and the end of this rank's last
 * batch: while a batch runs nobody negotiates, and the batch's waits have their own bound.
 * Free of MPI (background.c sends the heartbeats), so unit tests drive it with made-up clocks.
 */
#ifndef CHORUS_LIVENESS_H
#define CHORUS_LIVENESS_H

#include <stdbool.h>

struct liveness {
    int rank;
    int size;
    double bound;           /* seconds of silence that mean failure; 0: never */
    double *heard;          /* per watched rank: its last message; INFINITY once it said BYE */
    double listening_since; /* end of this rank's last batch */
    double last_sent;       /* this rank's last negotiation message */
    double last_check;
};

/* Starts watching at `now`. False when out of memory. */
bool liveness_init(struct liveness *liveness, int rank, int size, double bound, double now);
void liveness_release(struct liveness *liveness);

/* How long this rank may stay silent before it sends a heartbeat: a quarter of the bound, at
 * most 5 s, so that one lost or late heartbeat is not yet a failure. */
double liveness_heartbeat_spacing(const struct liveness *liveness);

void liveness_heard(struct liveness *liveness, int rank, double now);
/* `rank` has said BYE: it stops sending, and that is no failure. */
void liveness_gone(struct liveness *liveness, int rank);
void liveness_sent(struct liveness *liveness, double now);
/* This rank finished running a batch at `now`. */
void liveness_batch_done(struct liveness *liveness, double now);

bool liveness_heartbeat_due(const struct liveness *liveness, double now);
/* The watched rank silent longest at `now`, and for how long (-1 when none is watched). */
int liveness_quietest(const struct liveness *liveness, double now, double *silence);
/* The watched rank silent longest beyond the bound, or -1 (then *silence is untouched). Checks
 * at most ten times a second. */
int liveness_silent_peer(struct liveness *liveness, double now, double *silence);

#endif
