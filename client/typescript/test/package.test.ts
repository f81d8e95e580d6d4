/** What `npm pack` ships: every source map's sources are in the tarball too. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const PACKAGE_ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** The paths `npm pack` would put in the tarball (without building: the build is there). */
function packedFiles(): string[] {
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const out = execFileSync(npm, ["pack", "--dry-run", "--ignore-scripts", "--json"], { cwd: PACKAGE_ROOT, encoding: "utf8" });
  const [pack] = JSON.parse(out) as { files: { path: string }[] }[];
  return pack!.files.map((f) => f.path);
}

test("every shipped source map points at sources that are shipped", () => {
  const files = packedFiles();
  const shipped = new Set(files.map((f) => normalize(f)));
  const maps = files.filter((f) => f.endsWith(".map"));
  assert.ok(maps.length > 0 && files.some((f) => f === "build/src/index.js"), "the tarball holds the build and its maps");
  for (const map of maps) {
    const { sources } = JSON.parse(readFileSync(join(PACKAGE_ROOT, map), "utf8")) as { sources: string[] };
    for (const source of sources) {
      const path = normalize(join(dirname(map), source));
      assert.ok(shipped.has(path), `${map} points at ${path}, which the tarball lacks`);
    }
  }
});
