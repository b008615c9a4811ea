/* NOTES 32: the kernel of a random graph (tests/semantics/test_ch09_tensor.py, fuse_reduce=True) on which gcc 12.2 stops with
   an internal compiler error in convert_mult_to_fma under uopc's flags: the softmax of (x[0:4] + s) concatenated
   with (x[0:2] + s) * 3. uopc's PRELUDE (exp2f, INFINITY) goes before it, as uopc.runtime.Program puts it. */
void r_6(float* restrict data0, float* restrict data1, float* restrict data2) {
  float val1 = data1[0];
  float acc0;
  acc0 = -INFINITY;
  float acc1;
  acc1 = 0.0f;
  for (int ridx1 = 0; ridx1 < 6; ridx1++) {
    float val2 = acc0;
    bool alu3 = (1&(ridx1<4));
    float val4 = data0[(alu3?(((ridx1/2)*2)+(ridx1%2)):0)];
    bool alu5 = ((3<ridx1)&1);
    float val6 = data0[(alu5?(ridx1+-4):0)];
    acc0 = ((val2>((alu3?(val4+val1):0.0f)+(alu5?((val6+val1)*3.0f):0.0f)))?val2:
            ((alu3?(val4+val1):0.0f)+(alu5?((val6+val1)*3.0f):0.0f)));
  }
  float val7 = acc0;
  float alu8 = (val7*-1.0f);
  for (int ridx2 = 0; ridx2 < 6; ridx2++) {
    float val9 = acc1;
    bool alu10 = (1&(ridx2<4));
    float val11 = data0[(alu10?(((ridx2/2)*2)+(ridx2%2)):0)];
    bool alu12 = ((3<ridx2)&1);
    float val13 = data0[(alu12?(ridx2+-4):0)];
    acc1 = (val9+exp2f(((((alu10?(val11+val1):0.0f)+(alu12?((val13+val1)*3.0f):0.0f))+alu8)*1.4426950408889634f)));
  }
  float val14 = acc1;
  #pragma omp parallel for
  for (int ridx0 = 0; ridx0 < 6; ridx0++) {
    bool alu15 = (1&(ridx0<4));
    float val16 = data0[(alu15?(((ridx0/2)*2)+(ridx0%2)):0)];
    bool alu17 = ((3<ridx0)&1);
    float val18 = data0[(alu17?(ridx0+-4):0)];
    data2[ridx0] = (exp2f(((((alu15?(val16+val1):0.0f)+(alu17?((val18+val1)*3.0f):0.0f))+alu8)*1.4426950408889634f))*
                    (1.0f/val14));
  }
}
