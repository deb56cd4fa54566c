// LSTM, basic kernel (TFLite's LstmCell): `gates` holds FC([input, previous activation]) as
// [B, 4 * units], in the order input gate, cell candidate, forget gate, output gate.
// At F16 and F32_F16 each step a half (RH), as the delegate's LSTM kernel computes on FLT4.
inline float sigmoid1(float v) { return RH(1.0f / (1.0f + exp(-v))); }
__kernel void lstm_cell(__global const FLT* gates, __global const FLT* prev_state, __global FLT* activ,
                        __global FLT* state, int4 gd, int4 sd, int units) {
  int s = get_global_id(0), b = get_global_id(1);
  if (s >= sd.w || b >= sd.x) return;
  float st[4], out[4];
  for (int l = 0; l < 4; l++) {
    int c = s * 4 + l;
    st[l] = 0.0f;
    out[l] = 0.0f;
    if (c >= units) continue;
    float in_gate = sigmoid1(read1(gates, gd, b, 0, 0, c));
    float candidate = RH(tanh(read1(gates, gd, b, 0, 0, units + c)));
    float forget = sigmoid1(read1(gates, gd, b, 0, 0, 2 * units + c));
    float out_gate = sigmoid1(read1(gates, gd, b, 0, 0, 3 * units + c));
    st[l] = RH(RH(in_gate * candidate) + RH(forget * read1(prev_state, sd, b, 0, 0, c)));
    out[l] = RH(out_gate * RH(tanh(st[l])));
  }
  STORE4((float4)(st[0], st[1], st[2], st[3]), slice_index(sd, b, 0, 0, s), state);
  STORE4((float4)(out[0], out[1], out[2], out[3]), slice_index(sd, b, 0, 0, s), activ);
}
