// interop-modern.mjs drives a built telson with the official v2 TypeScript
// client (@modelcontextprotocol/client), once pinned to the 2026-07-28 era
// (server/discover, per-request _meta) and once in 'auto' mode (probe, then
// the era the server offers). In each it also writes a skill, which InvokeSkill
// loads at once, and calls a tool with arguments
// telson does not know. Run: node interop-modern.mjs /path/to/telson
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const telson = process.argv[2];
let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures++;
};

for (const mode of [{ pin: "2026-07-28" }, "auto"]) {
  const label = JSON.stringify(mode);
  const dir = mkdtempSync(join(tmpdir(), "telson-interop-"));
  const transport = new StdioClientTransport({ command: telson, args: [], stderr: "inherit", cwd: dir });
  const client = new Client({ name: "telson-interop-modern", version: "1.0.0" }, { capabilities: {}, versionNegotiation: { mode } });
  await client.connect(transport);
  const v = client.getNegotiatedProtocolVersion?.();
  check(v === "2026-07-28", `${label}: negotiated ${v}`);
  const { tools } = await client.listTools();
  check(tools.some((t) => t.name === "Bash"), `${label}: tools/list (${tools.length} tools)`);
  const res = await client.callTool({ name: "Bash", arguments: { command: "echo modern-$((40+2))" } });
  check(!res.isError && res.content[0].text === "modern-42\n", `${label}: tools/call Bash ${JSON.stringify(res.content[0].text)}`);
  const extra = await client.callTool({
    name: "Bash",
    arguments: { command: "echo extra", timeout: "5000", description: "say extra", wait_for_previous: true },
  });
  check(!extra.isError && extra.content[0].text === "extra\n", `${label}: unknown arguments ignored ${JSON.stringify(extra.content[0].text)}`);

  mkdirSync(join(dir, ".claude", "skills", "interop"), { recursive: true });
  writeFileSync(join(dir, ".claude", "skills", "interop", "SKILL.md"), "---\ndescription: interop check\n---\nSay hi.\n");
  const skill = await client.callTool({ name: "InvokeSkill", arguments: { skill_name: "interop" } });
  check(!skill.isError && skill.content[0].text.includes("Say hi."), `${label}: a new skill InvokeSkill loads`);
  await client.close();
  rmSync(dir, { recursive: true, force: true });
}
console.log(failures === 0 ? "interop-modern: all passed" : `interop-modern: ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
