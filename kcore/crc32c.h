/* CRC32C (Castagnoli, RecordBatch v2) and CRC32 (IEEE, legacy message sets v0/v1).
 *
 * Software path: slicing-by-8 tables, one per polynomial, built once by kc_crc_init().
 * Hardware path (x86-64 only): the SSE4.2 crc32 instruction, selected at run time with
 * __builtin_cpu_supports so the module itself is compiled for the baseline ISA; only the
 * functions carrying __attribute__((target("sse4.2"))) use the instruction.  The hardware
 * path runs three independent instruction chains (the crc32 instruction has a latency of
 * three cycles but a throughput of one per cycle) and joins the three partial CRCs with
 * precomputed "append N zero bytes" operators, which are linear maps on the 32-bit state.
 *
 * All functions take and return the *finalised* CRC (like zlib.crc32), so a running value
 * can be chained: crc(b, crc(a)) == crc(a + b).  Everything here is pure C: callers may
 * hold or release the GIL.
 */
#ifndef KCORE_CRC32C_H
#define KCORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KC_POLY_CRC32C 0x82F63B78u /* reflected Castagnoli */
#define KC_POLY_CRC32  0xEDB88320u /* reflected IEEE 802.3 */

static uint32_t kc_tab_c[8][256];
static uint32_t kc_tab_ieee[8][256];
static int kc_crc_ready = 0;
static int kc_crc_hw = 0;

/* Little-endian 64-bit load spelled out byte by byte: correct on any host, and compilers
 * turn it into one load on little-endian machines. */
static inline uint64_t kc_load_le64(const uint8_t *p)
{
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) |
           ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) |
           ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

static void kc_build_tables(uint32_t tab[8][256], uint32_t poly)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            tab[t][i] = (tab[t - 1][i] >> 8) ^ tab[0][tab[t - 1][i] & 0xff];
}

/* Raw (unconditioned) slicing-by-8 update. */
static uint32_t kc_crc_sw_raw(uint32_t tab[8][256], uint32_t crc, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w = kc_load_le64(p) ^ (uint64_t)crc;
        crc = tab[7][w & 0xff] ^ tab[6][(w >> 8) & 0xff] ^ tab[5][(w >> 16) & 0xff] ^
              tab[4][(w >> 24) & 0xff] ^ tab[3][(w >> 32) & 0xff] ^ tab[2][(w >> 40) & 0xff] ^
              tab[1][(w >> 48) & 0xff] ^ tab[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = tab[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static inline uint32_t kc_crc32c_sw(uint32_t crc, const uint8_t *p, size_t n)
{
    return ~kc_crc_sw_raw(kc_tab_c, ~crc, p, n);
}

static inline uint32_t kc_crc32_ieee(uint32_t crc, const uint8_t *p, size_t n)
{
    return ~kc_crc_sw_raw(kc_tab_ieee, ~crc, p, n);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KC_HAVE_X86_HW 1
#include <nmmintrin.h>

/* Stream lengths for the 3-way split: long blocks for big batches, short ones so that
 * batches of a few KB also use all three chains. */
#define KC_LONG 8192
#define KC_SHORT 256

/* shift tables: kc_shift_X[k][b] = state reached from (b << 8k) after X zero bytes */
static uint32_t kc_shift_long[4][256];
static uint32_t kc_shift_short[4][256];

static void kc_build_shift(uint32_t out[4][256], size_t zeros)
{
    uint32_t basis[32];
    for (int j = 0; j < 32; j++) {
        uint32_t c = 1u << j;
        for (size_t z = 0; z < zeros; z++)
            c = kc_tab_c[0][c & 0xff] ^ (c >> 8);
        basis[j] = c;
    }
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int i = 0; i < 8; i++)
                if (b & (1u << i))
                    v ^= basis[8 * k + i];
            out[k][b] = v;
        }
}

static inline uint32_t kc_shift(uint32_t t[4][256], uint32_t c)
{
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t
kc_crc32c_hw_raw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c0 = crc;
    while (n && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        n--;
    }
    while (n >= 3 * KC_LONG) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + KC_LONG;
        do {
            uint64_t a, b, d;
            memcpy(&a, p, 8);
            memcpy(&b, p + KC_LONG, 8);
            memcpy(&d, p + 2 * KC_LONG, 8);
            c0 = _mm_crc32_u64(c0, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, d);
            p += 8;
        } while (p < end);
        c0 = kc_shift(kc_shift_long, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = kc_shift(kc_shift_long, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * KC_LONG;
        n -= 3 * KC_LONG;
    }
    while (n >= 3 * KC_SHORT) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + KC_SHORT;
        do {
            uint64_t a, b, d;
            memcpy(&a, p, 8);
            memcpy(&b, p + KC_SHORT, 8);
            memcpy(&d, p + 2 * KC_SHORT, 8);
            c0 = _mm_crc32_u64(c0, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, d);
            p += 8;
        } while (p < end);
        c0 = kc_shift(kc_shift_short, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = kc_shift(kc_shift_short, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * KC_SHORT;
        n -= 3 * KC_SHORT;
    }
    while (n >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c0 = _mm_crc32_u64(c0, a);
        p += 8;
        n -= 8;
    }
    while (n--)
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}

static inline uint32_t kc_crc32c_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    return ~kc_crc32c_hw_raw(~crc, p, n);
}
#else
#define KC_HAVE_X86_HW 0
static inline uint32_t kc_crc32c_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    return kc_crc32c_sw(crc, p, n);
}
#endif

/* Called once at module import (under the GIL). */
static void kc_crc_init(void)
{
    if (kc_crc_ready)
        return;
    kc_build_tables(kc_tab_c, KC_POLY_CRC32C);
    kc_build_tables(kc_tab_ieee, KC_POLY_CRC32);
#if KC_HAVE_X86_HW
    kc_build_shift(kc_shift_long, KC_LONG);
    kc_build_shift(kc_shift_short, KC_SHORT);
    __builtin_cpu_init();
    kc_crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
    kc_crc_ready = 1;
}

static inline int kc_crc32c_has_hw(void) { return kc_crc_hw; }

static inline uint32_t kc_crc32c(uint32_t crc, const uint8_t *p, size_t n)
{
    return kc_crc_hw ? kc_crc32c_hw(crc, p, n) : kc_crc32c_sw(crc, p, n);
}


#endif /* KCORE_CRC32C_H */
