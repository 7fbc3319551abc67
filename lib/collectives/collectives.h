/*
 * collectives.h — the host collectives, the one header of lib/collectives: the algorithms, their
 * selection table (algorithms.h), the reduction kernels (reduce.h) and buffers made of pieces
 * (pieces.h).
 */
#ifndef CHORUS_COLLECTIVES_H
#define CHORUS_COLLECTIVES_H

#include "algorithms.h"
#include "pieces.h"
#include "reduce.h"

#endif
