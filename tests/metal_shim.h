// A stand-in for the parts of the Metal Shading Language that fnarray's Metal kernels use, so that
// `g++ -std=c++17 -fsyntax-only` can check the rendered source on a machine without Metal
// (tests/test_metal_kernels.py). Written from the MSL specification's names and types; it declares only what
// MSL has, so a name MSL lacks (metal::erf, an unqualified exp) is an error here too. What it cannot check: the
// address spaces (device, threadgroup, constant are empty here) and Metal's own compiler's rules beyond C++.
//
// With FA_METAL_RUN defined (and -std=c++20 -pthread) it also defines what it declares, so that a kernel can run
// on the CPU: a driver runs one threadgroup at a time, one std::thread per Metal thread; threadgroup arrays
// become function-level statics (shared by the group's threads) and threadgroup_barrier waits on the group's
// std::barrier (fa_barrier).

#include <stdint.h>
#ifdef FA_METAL_RUN   // what the driver needs, before the macros below hide `thread` and the rest
#include <barrier>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>
#endif

// Address spaces: qualifiers in MSL, nothing here (threadgroup memory: shared statics when running).
#define device
#define constant
#define thread
#ifdef FA_METAL_RUN
#define threadgroup static
inline std::barrier<>* fa_barrier = nullptr;
#else
#define threadgroup
#endif

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;     // 64 bits in MSL, as on LP64 Linux
typedef _Float16 half;
typedef half float16_t;          // MLX's name for half in the signatures it writes

struct uint3 {
  uint x, y, z;
};

// MSL's special constants (float).
#define NAN __builtin_nanf("")
#define INFINITY __builtin_inff()

// as_type<T>(x): the same bits as another type of the same size (MSL: a compile error otherwise).
template <typename T, typename U>
T as_type(U x) {
  static_assert(sizeof(T) == sizeof(U), "as_type needs types of the same size");
  return __builtin_bit_cast(T, x);
}

namespace metal {

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }

#ifdef FA_METAL_RUN
inline void threadgroup_barrier(mem_flags) { fa_barrier->arrive_and_wait(); }
#define FA_UNARY(name)                                             \
  inline float name(float x) { return __builtin_##name##f(x); }    \
  inline half name(half x) { return half(__builtin_##name##f(float(x))); }
#define FA_BINARY(name)                                                          \
  inline float name(float x, float y) { return __builtin_##name##f(x, y); }      \
  inline half name(half x, half y) { return half(__builtin_##name##f(float(x), float(y))); }
#define FA_TEST(name, builtin)                                     \
  inline bool name(float x) { return builtin(x); }                 \
  inline bool name(half x) { return builtin(float(x)); }
#define FA_INTEGER(T)                                                  \
  inline T min(T x, T y) { return y < x ? y : x; }                     \
  inline T max(T x, T y) { return x < y ? y : x; }                     \
  inline T abs(T x) { return x < 0 ? static_cast<T>(-x) : x; }         \
  inline T popcount(T x) {                                             \
    return static_cast<T>(__builtin_popcountll((unsigned long long)x & (~0ULL >> (64 - 8 * sizeof(T))))); }
// MSL's names for what the C library calls otherwise: min/max of floats are fmin/fmax, rsqrt is 1/sqrt.
inline float rsqrt(float x) { return 1.0f / __builtin_sqrtf(x); }
inline half rsqrt(half x) { return half(1.0f / __builtin_sqrtf(float(x))); }
inline float min(float x, float y) { return __builtin_fminf(x, y); }
inline half min(half x, half y) { return half(__builtin_fminf(float(x), float(y))); }
inline float max(float x, float y) { return __builtin_fmaxf(x, y); }
inline half max(half x, half y) { return half(__builtin_fmaxf(float(x), float(y))); }
#else
void threadgroup_barrier(mem_flags flags);
#define FA_UNARY(name) float name(float x); half name(half x);
#define FA_BINARY(name) float name(float x, float y); half name(half x, half y);
#define FA_TEST(name, builtin) bool name(float x); bool name(half x);
#define FA_INTEGER(T) T min(T x, T y); T max(T x, T y); T abs(T x); T popcount(T x);
float rsqrt(float x); half rsqrt(half x);
FA_BINARY(min) FA_BINARY(max)
#endif

// Float math of MSL's standard library, for float and half.
FA_UNARY(acos) FA_UNARY(acosh) FA_UNARY(asin) FA_UNARY(asinh) FA_UNARY(atan) FA_UNARY(atanh)
FA_UNARY(ceil) FA_UNARY(cos) FA_UNARY(cosh) FA_UNARY(exp) FA_UNARY(exp2) FA_UNARY(fabs) FA_UNARY(floor)
FA_UNARY(log) FA_UNARY(log10) FA_UNARY(log2) FA_UNARY(rint) FA_UNARY(sin) FA_UNARY(sinh)
FA_UNARY(sqrt) FA_UNARY(tan) FA_UNARY(tanh) FA_UNARY(trunc)
FA_BINARY(atan2) FA_BINARY(copysign) FA_BINARY(fmod) FA_BINARY(pow)
FA_TEST(isnan, __builtin_isnan) FA_TEST(isinf, __builtin_isinf) FA_TEST(isfinite, __builtin_isfinite)

// Integer functions, one overload per integer type (a call on mixed types is ambiguous, as in MSL).
FA_INTEGER(char) FA_INTEGER(signed char) FA_INTEGER(uchar) FA_INTEGER(short) FA_INTEGER(ushort)
FA_INTEGER(int) FA_INTEGER(uint) FA_INTEGER(long) FA_INTEGER(ulong)
#undef FA_UNARY
#undef FA_BINARY
#undef FA_TEST
#undef FA_INTEGER

}  // namespace metal
