/*
 * fusion.h — fusion, the one header of lib/fusion: which agreed responses travel together
 * (fusion_plan.h), the segmented pipeline of a packed batch through the fusion buffer
 * (packed_pipeline.h), and the copier thread that packs and unpacks beside it (copier.h).
 */
#ifndef CHORUS_FUSION_H
#define CHORUS_FUSION_H

#include "copier.h"
#include "fusion_plan.h"
#include "packed_pipeline.h"

#endif
