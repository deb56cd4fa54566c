// Drives a headless Chromium over the DevTools protocol for tests/test_explorer.py (Node >= 20 with
// --experimental-websocket; no npm package): runs each step of STEPS.json in the page until it returns
// true (a step that clicks returns true once it found and clicked its element), then writes a PNG of
// the page to OUT.
//   node --experimental-websocket cdp.js DEBUG_PORT STEPS.json OUT.png
// Each step: {"js": "<expression>", "timeout_ms": N}. Prints one JSON line per step: {step, ok, value}.
const [port, stepsPath, out] = process.argv.slice(2);
const fs = require("fs");
const steps = JSON.parse(fs.readFileSync(stepsPath, "utf8"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

(async () => {
  let page;
  for (let i = 0; i < 100 && !page; i++) {
    try {
      const list = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
      page = list.find((p) => p.type === "page");
    } catch (e) {}
    if (!page) await sleep(200);
  }
  if (!page) throw new Error("no page on the DevTools port");
  const ws = new WebSocket(page.webSocketDebuggerUrl);
  let id = 0;
  const pending = {};
  ws.onmessage = (e) => {
    const m = JSON.parse(e.data);
    if (m.id && pending[m.id]) {
      pending[m.id](m);
      delete pending[m.id];
    }
  };
  await new Promise((r) => (ws.onopen = r));
  const send = (method, params = {}) =>
    new Promise((r) => {
      const i = ++id;
      pending[i] = r;
      ws.send(JSON.stringify({ id: i, method, params }));
    });
  let failed = false;
  for (const [i, step] of steps.entries()) {
    const deadline = Date.now() + (step.timeout_ms || 30000);
    let value;
    for (;;) {
      const r = await send("Runtime.evaluate", { expression: step.js, returnByValue: true, awaitPromise: true });
      value = r.result && r.result.result ? r.result.result.value : r;
      if (value === true || Date.now() > deadline) break;
      await sleep(250);
    }
    console.log(JSON.stringify({ step: i, ok: value === true, value }));
    if (value !== true) {
      failed = true;
      break;
    }
  }
  const shot = await send("Page.captureScreenshot", { format: "png" });
  fs.writeFileSync(out, Buffer.from(shot.result.data, "base64"));
  ws.close();
  process.exit(failed ? 1 : 0);
})().catch((e) => {
  console.error(String(e));
  process.exit(2);
});
