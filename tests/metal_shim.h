// A stand-in for the parts of the Metal Shading Language that fnarray's Metal kernels use, so that
// `g++ -std=c++17 -fsyntax-only` can check the rendered source on a machine without Metal
// (tests/test_metal_kernels.py). Written from the MSL specification's names and types; it declares only what
// MSL has, so a name MSL lacks (metal::erf, an unqualified exp) is an error here too. What it cannot check: the
// address spaces (device, threadgroup, constant are empty here) and Metal's own compiler's rules beyond C++.

#include <stdint.h>

// Address spaces: qualifiers in MSL, nothing here.
#define device
#define threadgroup
#define constant
#define thread

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
void threadgroup_barrier(mem_flags flags);

// Float math of MSL's standard library, for float and half.
#define FA_UNARY(name) float name(float x); half name(half x);
#define FA_BINARY(name) float name(float x, float y); half name(half x, half y);
FA_UNARY(acos) FA_UNARY(acosh) FA_UNARY(asin) FA_UNARY(asinh) FA_UNARY(atan) FA_UNARY(atanh)
FA_UNARY(ceil) FA_UNARY(cos) FA_UNARY(cosh) FA_UNARY(exp) FA_UNARY(exp2) FA_UNARY(fabs) FA_UNARY(floor)
FA_UNARY(log) FA_UNARY(log10) FA_UNARY(log2) FA_UNARY(rint) FA_UNARY(rsqrt) FA_UNARY(sin) FA_UNARY(sinh)
FA_UNARY(sqrt) FA_UNARY(tan) FA_UNARY(tanh) FA_UNARY(trunc)
FA_BINARY(atan2) FA_BINARY(copysign) FA_BINARY(fmod) FA_BINARY(pow) FA_BINARY(min) FA_BINARY(max)
bool isnan(float x); bool isnan(half x);
bool isinf(float x); bool isinf(half x);
bool isfinite(float x); bool isfinite(half x);

// Integer functions, one overload per integer type (a call on mixed types is ambiguous, as in MSL).
#define FA_INTEGER(T) T min(T x, T y); T max(T x, T y); T abs(T x); T popcount(T x);
FA_INTEGER(char) FA_INTEGER(signed char) FA_INTEGER(uchar) FA_INTEGER(short) FA_INTEGER(ushort)
FA_INTEGER(int) FA_INTEGER(uint) FA_INTEGER(long) FA_INTEGER(ulong)
#undef FA_UNARY
#undef FA_BINARY
#undef FA_INTEGER

}  // namespace metal
