/*
 * liveness.c — heartbeat timing and silent peers (see liveness.h).
 */
#include "liveness.h"

#include <math.h>
#include <stdlib.h>

#define HEARTBEAT_SPACING_LIMIT 5.0
#define CHECKS_PER_SECOND 10.0

bool liveness_init(struct liveness *liveness, int rank, int size, double bound, double now)
{
    *liveness = (struct liveness){.rank = rank,
                                  .size = size,
                                  .bound = bound,
                                  .listening_since = now,
                                  .last_sent = now,
                                  .last_check = now};
    liveness->heard = malloc((size_t)(size > 0 ? size : 1) * sizeof *liveness->heard);
    if (liveness->heard == NULL)
        return false;
    for (int r = 0; r < size; r++)
        liveness->heard[r] = r == rank ? INFINITY : now;
    return true;
}

void liveness_release(struct liveness *liveness)
{
    free(liveness->heard);
    liveness->heard = NULL;
}

double liveness_heartbeat_spacing(const struct liveness *liveness)
{
    double spacing = liveness->bound / 4;
    return spacing > HEARTBEAT_SPACING_LIMIT ? HEARTBEAT_SPACING_LIMIT : spacing;
}

void liveness_heard(struct liveness *liveness, int rank, double now)
{
    if (rank >= 0 && rank < liveness->size && liveness->heard[rank] < now)
        liveness->heard[rank] = now;
}

void liveness_gone(struct liveness *liveness, int rank)
{
    if (rank >= 0 && rank < liveness->size)
        liveness->heard[rank] = INFINITY;
}

void liveness_sent(struct liveness *liveness, double now)
{
    liveness->last_sent = now;
}

void liveness_batch_done(struct liveness *liveness, double now)
{
    liveness->listening_since = now;
}

bool liveness_heartbeat_due(const struct liveness *liveness, double now)
{
    return liveness->bound > 0 && liveness->size > 1 &&
           now - liveness->last_sent >= liveness_heartbeat_spacing(liveness);
}

int liveness_quietest(const struct liveness *liveness, double now, double *silence)
{
    /* Rank 0 watches every rank; the others watch rank 0 alone. */
    int watched = liveness->rank == 0 ? liveness->size : 1;
    int quietest = -1;
    double longest = -INFINITY;
    for (int r = 0; r < watched; r++) {
        double since = fmax(liveness->heard[r], liveness->listening_since);
        if (now - since > longest) {
            longest = now - since;
            quietest = r;
        }
    }
    *silence = longest;
    return quietest;
}

int liveness_silent_peer(struct liveness *liveness, double now, double *silence)
{
    if (liveness->bound <= 0 || now - liveness->last_check < 1 / CHECKS_PER_SECOND)
        return -1;
    liveness->last_check = now;
    double longest = 0;
    int quietest = liveness_quietest(liveness, now, &longest);
    if (quietest < 0 || longest <= liveness->bound)
        return -1;
    *silence = longest;
    return quietest;
}
