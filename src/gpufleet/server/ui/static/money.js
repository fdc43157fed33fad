// An amount of the pools' cost (docs/capacity.md), as the CLI writes it: `$12.50`.
export function money(amount) {
  const n = Number(amount || 0);
  return `$${n.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}
