// token-proxy.mjs: the conformance suite's client sends no Authorization header, and telson
// wants its bearer token on every request, loopback included. This proxy listens on a
// loopback port and forwards each request to telson as it came (method, path, headers, Host
// and Origin included, body), with the token added; the answer comes back as telson gave it.
//   node token-proxy.mjs http://127.0.0.1:PORT TOKEN    prints: proxy http://127.0.0.1:P/mcp
import http from "node:http";

const [target, token] = process.argv.slice(2);
const to = new URL(target);
const proxy = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const up = http.request({ host: to.hostname, port: to.port, method: req.method, path: req.url, headers }, (answer) => {
    res.writeHead(answer.statusCode, answer.headers);
    answer.pipe(res);
  });
  up.on("error", () => res.destroy());
  req.pipe(up);
});
proxy.listen(0, "127.0.0.1", () => console.log(`proxy http://127.0.0.1:${proxy.address().port}/mcp`));
