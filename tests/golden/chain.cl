#ifndef FA_TANH_F32
#define FA_TANH_F32
__attribute__((always_inline)) float fa_tanh_f32(const float x) {
    const float ax = as_float(as_int(x) & 0x7fffffff);
    const float x2 = x * x;
    const float p = ax + ax * x2 * (-0.33333281f + x2 * (0.13331382f + x2 * (-0.05373532f
                    + x2 * (0.020626292f + x2 * (-0.0056919856f)))));
    const float y0 = -2.8853900817779268f * ax;
    const float y = (y0 >= -126.0f) ? y0 : -126.0f;
    const int k = (int)(y - 0.5f);
    const float f = y - (float)k;
    const float q = 1.0f + f * (0.6931472f + f * (0.24022646f + f * (0.05550329f + f * (0.00961852f
                    + f * (0.001339986f + f * 0.00015337577f)))));
    const float e = q * as_float((k + 127) << 23);
    const float r = (ax < 0.625f) ? p : (1.0f - e) / (1.0f + e);
    return (x != x) ? x : as_float(as_int(r) | (as_int(x) & (int)0x80000000));
}
#endif
__kernel void map_mul_add_tanh(const int n, __global const float* restrict in0, __global const float* restrict in1, __global const float* restrict in2, __global float* restrict out3) {
    const int gid = ((int)get_global_id(0));
    if (gid < n) {
        const float v0 = in0[gid];
        const float v1 = in1[gid];
        const float v2 = (v0 * v1);
        const float v3 = in2[gid];
        const float v4 = (v2 + v3);
        const float v5 = fa_tanh_f32(v4);
        const float v6 = (v5 * v1);
        const float v7 = (v6 + 1.0f);
        out3[gid] = v7;
    }
}
