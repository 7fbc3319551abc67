/*
 * dtype.h — conversions between float32 and the 16-bit floating formats (IEEE float16 and
 * bfloat16), for the reduction kernels, compression and the GPU path's scale factors. Inline:
 * they sit in the reductions' inner loops.
 */
#ifndef CHORUS_DTYPE_H
#define CHORUS_DTYPE_H

#include <stdint.h>
#include <string.h>

static inline uint32_t float_bits(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static inline float bits_float(uint32_t bits)
{
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* Shifts the half's exponent and mantissa into float position, then multiplies by 2^112 to
 * rebias the exponent; this handles subnormal halves exactly. Infinities and NaNs (exponent all
 * ones) get the float's all-ones exponent. */
static inline float half_to_float(uint16_t half)
{
    float magnitude = bits_float((uint32_t)(half & 0x7fffu) << 13) * 0x1p112f;
    uint32_t bits = float_bits(magnitude);
    bits |= (half & 0x7c00u) == 0x7c00u ? 0x7f800000u : 0u;
    bits |= (uint32_t)(half & 0x8000u) << 16;
    return bits_float(bits);
}

/* Round to nearest even. Values too large become infinity, NaN stays NaN (quiet), subnormal
 * results are rounded by adding a magic number that aligns the float's mantissa. */
static inline uint16_t float_to_half(float value)
{
    uint32_t bits = float_bits(value);
    uint32_t sign = (bits >> 16) & 0x8000u;
    bits &= 0x7fffffffu;
    uint16_t result;
    if (bits >= 0x47800000u) { /* >= 65536: overflow, infinity or NaN */
        result = bits > 0x7f800000u ? 0x7e00u : 0x7c00u;
    } else if (bits < 0x38800000u) { /* below the smallest normal half */
        float shifted = bits_float(bits) + 0.5f;
        result = (uint16_t)(float_bits(shifted) - float_bits(0.5f));
    } else {
        uint32_t mantissa_odd = (bits >> 13) & 1u;
        bits += 0xc8000fffu + mantissa_odd; /* rebias exponent by -112 and round */
        result = (uint16_t)(bits >> 13);
    }
    return (uint16_t)(result | sign);
}

static inline float bfloat16_to_float(uint16_t bfloat)
{
    return bits_float((uint32_t)bfloat << 16);
}

static inline uint16_t float_to_bfloat16(float value)
{
    uint32_t bits = float_bits(value);
    uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (bits >> 16) | 0x40u;
    return (uint16_t)((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

#endif
