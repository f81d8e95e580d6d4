/**
 * The shape of a request header (docs/headers.md), checked before a writer sends it, by the
 * rule the service applies (the Python clients' `sessionlog.core.headers.check_header`): sent,
 * the service's refusal ended the writer, and every later call said so (a harness with no tools
 * sent `tools: []`). Refused here, the report is the call's failure and the writer goes on.
 */

import { invalid } from "./arguments.js";
import { isObject, jsonObjectField } from "./convert.js";

/** The keys a header may have. */
const HEADER_KEYS = ["config", "adapterDefaults", "tools"];

/** Keys the request (`{...config, messages, tools}`) sets itself, so a config may not hold them. */
const RESERVED_CONFIG_KEYS = ["messages", "tools"];

/** A header that is not `{config, adapterDefaults?, tools?}` in canonical form: a ValidationError with the service's reason. */
export function checkHeader(header: unknown): void {
  if (!isObject(header)) throw invalid("HEADER_NOT_OBJECT", "header", "must be a JSON object");
  if (header.system !== undefined) {
    throw invalid("HEADER_SYSTEM_FORBIDDEN", "header.system", "is not part of the header: the system prompt is surface node 0");
  }
  const unknown = Object.keys(header).filter((key) => header[key] !== undefined && !HEADER_KEYS.includes(key)).sort();
  if (unknown.length > 0) {
    throw invalid("HEADER_UNKNOWN_KEY", "header", `has unknown keys ${unknown.join(", ")}: a header is {config, adapterDefaults?, tools?}`);
  }
  const config = header.config;
  if (!isObject(config)) throw invalid("HEADER_CONFIG_MISSING", "header.config", "must be a JSON object");
  for (const key of RESERVED_CONFIG_KEYS) {
    if (config[key] !== undefined) {
      throw invalid(
        "HEADER_CONFIG_RESERVED_KEY",
        `header.config.${key}`,
        "may not be in config: the request sets it (tool schemas go in the header's tools, messages are the session's surface)",
      );
    }
  }
  if (header.tools !== undefined) {
    if (!Array.isArray(header.tools)) throw invalid("HEADER_BAD_TOOLS", "header.tools", "must be a list");
    if (header.tools.length === 0) throw invalid("HEADER_EMPTY_TOOLS", "header.tools", "[] is not canonical: leave tools out when there are none");
  }
  if (header.adapterDefaults !== undefined) {
    if (!isObject(header.adapterDefaults)) throw invalid("HEADER_BAD_ADAPTER_DEFAULTS", "header.adapterDefaults", "must be a JSON object");
    if (Object.keys(header.adapterDefaults).length === 0) {
      throw invalid("HEADER_EMPTY_ADAPTER_DEFAULTS", "header.adapterDefaults", "{} is not canonical: leave it out when empty");
    }
  }
}

/** The header as the wire takes it, once `checkHeader` finds its shape right. */
export function headerJson(header: unknown): Uint8Array {
  checkHeader(header);
  return jsonObjectField(header, "header", "HEADER_NOT_OBJECT");
}
